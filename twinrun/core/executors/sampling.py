"""Executor decoding: the fields a request carries, what the server applies to the fields it leaves out, and one
line when the two differ from what the spec states.

What vLLM does (read from its source: ``ModelConfig.get_diff_sampling_param`` and the OpenAI chat serving layer):
a request field left out takes the server's default. Under ``--generation-config auto`` (vLLM's default since
early 2025, PR #12622) those defaults come from the model's ``generation_config.json`` for exactly
``temperature, top_p, top_k, min_p, repetition_penalty`` (Qwen3-8B's file says 0.6 / 0.95 / 20), merged with
``--override-generation-config``; its ``max_new_tokens``, if any, caps every request's ``max_tokens``. Under
``--generation-config vllm`` only the overrides apply on top of vLLM's own defaults. ``presence_penalty`` is never
taken from the file (0 unless sent).

What vLLM reports: not ``/v1/models`` (id, ``owned_by: "vllm"``, ``max_model_len``) and nothing in a chat
response. ``GET /server_info?config_format=json`` (served when ``VLLM_SERVER_DEV_MODE=1``) returns the engine
config, whose ``model_config`` holds ``generation_config`` (``auto`` / ``vllm`` / a folder) and
``override_generation_config`` - the source and the overrides, not the file's values. So the values taken from a
model's file are *unreported* (null in the record), and a vLLM server without ``/server_info`` is taken to run its
default, ``auto``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from twinrun.core.records import SamplingRecord

DECODING_FIELDS = ("temperature", "top_p", "top_k", "min_p", "presence_penalty", "repetition_penalty", "max_tokens")
# vLLM's own defaults for a field a request leaves out (SamplingParams; top_k 0 and -1 both mean off)
VLLM_DEFAULTS: dict[str, Any] = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0,
                                 "presence_penalty": 0.0, "repetition_penalty": 1.0}
# the fields vLLM fills from a generation config (ModelConfig.get_diff_sampling_param; max_new_tokens -> a cap)
VLLM_FROM_GENERATION_CONFIG = ("repetition_penalty", "temperature", "top_k", "top_p", "min_p")
_NEUTRAL_TOP_K = (0, -1)


@dataclass(frozen=True)
class ServerDefaults:
    """What a server applies to the decoding fields a request leaves out, as far as it reports it.

    defaults: field -> the value the server applies; unreported: fields it fills from a file it does not report;
    max_tokens_cap: a server-wide cap on max_tokens (vLLM: max_new_tokens of the generation config)."""

    source: str
    defaults: dict[str, Any] = field(default_factory=dict)
    unreported: tuple[str, ...] = ()
    max_tokens_cap: int | None = None


def vllm_server_defaults(server_info: Any) -> ServerDefaults | None:
    """ServerDefaults from vLLM's ``/server_info?config_format=json`` body; None when it is not that shape."""
    config = server_info.get("vllm_config") if isinstance(server_info, Mapping) else None
    model_config = config.get("model_config") if isinstance(config, Mapping) else None
    if not isinstance(model_config, Mapping):
        return None
    source = model_config.get("generation_config") or "auto"
    override = model_config.get("override_generation_config") or {}
    if not isinstance(override, Mapping):
        override = {}
    if source == "vllm":
        defaults, unreported = dict(VLLM_DEFAULTS), ()
    else:  # "auto" or a folder: the file's values are not in the report
        defaults = {"presence_penalty": VLLM_DEFAULTS["presence_penalty"]}
        unreported = tuple(f for f in VLLM_FROM_GENERATION_CONFIG if f not in override)
    defaults.update({k: override[k] for k in VLLM_FROM_GENERATION_CONFIG if override.get(k) is not None})
    cap = override.get("max_new_tokens")
    return ServerDefaults(
        source=f"vLLM /server_info: --generation-config {source}"
        + (f", --override-generation-config {dict(override)}" if override else ""),
        defaults=defaults, unreported=unreported, max_tokens_cap=cap if isinstance(cap, int) else None,
    )


def vllm_assumed_defaults() -> ServerDefaults:
    """A vLLM server (``owned_by: "vllm"`` on /v1/models) that does not serve /server_info: its default
    ``--generation-config auto`` is assumed, so every field it could fill from the model's file is unreported."""
    return ServerDefaults(
        source="vLLM without /server_info (VLLM_SERVER_DEV_MODE unset): --generation-config auto assumed",
        defaults={"presence_penalty": VLLM_DEFAULTS["presence_penalty"]}, unreported=VLLM_FROM_GENERATION_CONFIG,
    )


def effective_sampling(sent: Mapping[str, Any], server: ServerDefaults | None) -> dict[str, Any]:
    """Decoding field -> the value the server applied: the sent value (max_tokens under the server's cap), else
    the server's reported default, else None (the server filled it without saying with what)."""
    out: dict[str, Any] = {}
    for f in DECODING_FIELDS:
        if f in sent:
            value = sent[f]
            if f == "max_tokens" and server is not None and server.max_tokens_cap is not None:
                value = min(int(value), server.max_tokens_cap)
            out[f] = value
        else:
            out[f] = server.defaults.get(f) if server is not None else None
    return out


def sampling_record(sent: Mapping[str, Any], server: ServerDefaults | None, *, not_reported: str) -> SamplingRecord:
    return SamplingRecord(sent=dict(sent), effective=effective_sampling(sent, server),
                          source=server.source if server is not None else not_reported)


def _neutral(field_name: str, value: Any) -> bool:
    return value in _NEUTRAL_TOP_K if field_name == "top_k" else value == VLLM_DEFAULTS.get(field_name)


def decoding_differences(sent: Mapping[str, Any], server: ServerDefaults | None) -> tuple[list[str], list[str]]:
    """Where what the server applies is not what the spec states: fields the spec leaves out that the server fills
    from an unreported file or with a non-neutral reported value, and a max_tokens the server caps.
    Returns (one phrase per difference, the fields a spec should state)."""
    if server is None:
        return [], []
    phrases: list[str] = []
    hidden = [f for f in server.unreported if f not in sent]
    if hidden:
        phrases.append(f"{', '.join(hidden)} not sent, so the server takes them from the model's generation config, "
                       "whose values it does not report")
    chosen = {f: v for f, v in server.defaults.items()
              if f not in sent and f not in server.unreported and not _neutral(f, v)}
    if chosen:
        phrases.append(f"{', '.join(f'{f}={v!r}' for f, v in chosen.items())} set by the server, not by the spec")
    cap = server.max_tokens_cap
    if cap is not None and "max_tokens" in sent and cap < int(sent["max_tokens"]):
        phrases.append(f"max_tokens={sent['max_tokens']} is capped at {cap} by the server's generation config")
    return phrases, [*hidden, *chosen]


def decoding_warning(where: str, sent: Mapping[str, Any], server: ServerDefaults | None, *,
                     section: str = "executor") -> str | None:
    """One line naming every difference and the fix, or None when the server applies what the spec states."""
    phrases, fields = decoding_differences(sent, server)
    if not phrases:
        return None
    assert server is not None
    fix = f"set {', '.join(f'{section}.{f}' for f in fields)} in the spec" if fields else \
        "raise the server's max_new_tokens"
    return f"warning: {where}: decoding differs from the spec ({server.source}): {'; '.join(phrases)} (fix: {fix})"
