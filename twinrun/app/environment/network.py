"""What a command reaches over the network, asked once each with a short timeout and no retries: the model ids
(a local folder, the HF cache, or the hub; HF_HUB_OFFLINE honoured), the OpenAI-compatible endpoints the spec
names (``/v1/models`` lists the model and accepts the key), and a Ray address."""

from __future__ import annotations

import socket
from collections.abc import Mapping
from pathlib import Path

from twinrun.app.environment.rows import Check

TIMEOUT_S = 3.0  # one attempt each: a retry storm (30 s of hub retries) is what these checks replace
TRUE = ("1", "true", "yes", "on")


def _offline(environ: Mapping[str, str]) -> str | None:
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if environ.get(name, "").lower() in TRUE:
            return name
    return None


def model_id(field: str, name: str | None, environ: Mapping[str, str], timeout_s: float = TIMEOUT_S) -> list[Check]:
    """``name`` resolves here: ``tiny-qwen3`` (built locally), a local folder, a repo in the HF cache, or (online)
    a repo the hub answers for."""
    from twinrun.models.tiny import TINY_QWEN3

    if not name or name == TINY_QWEN3:
        return []
    local = Path(name).expanduser()
    if local.is_dir():  # resolvable; what the folder holds is the loader's (and the resume guards') to judge
        return [Check(field, f"{name} (local folder)", "ok")]
    if name.startswith((".", "/", "~")) or name.count("/") > 1:
        return [Check(field, repr(name), "fail", "is no folder here, and not a hub id (fix: the model folder's path, "
                      "or an id like Qwen/Qwen3-8B)")]
    try:
        from huggingface_hub import constants, try_to_load_from_cache

        cached = try_to_load_from_cache(name, "config.json")
        cache = constants.HF_HUB_CACHE
    except Exception:  # noqa: BLE001 - an id huggingface_hub rejects: the hub check below says so
        cached, cache = None, "the HF cache"
    if isinstance(cached, str):
        return [Check(field, f"{name} (HF cache)", "ok")]
    offline = _offline(environ)
    if offline:
        return [Check(field, repr(name), "fail",
                      f"is not in the HF cache ({cache}) and {offline}=1 (fix: `huggingface-cli download {name}` on "
                      f"a connected machine into that cache, or a local model folder)")]
    endpoint = environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    import httpx

    token = environ.get("HF_TOKEN")
    try:
        r = httpx.get(f"{endpoint}/api/models/{name}", timeout=timeout_s,
                      headers={"Authorization": f"Bearer {token}"} if token else None)
    except httpx.HTTPError as e:
        return [Check(field, repr(name), "fail",
                      f"is not in the HF cache and the hub ({endpoint}) did not answer within {timeout_s:g} s "
                      f"({type(e).__name__}) (fix: download it where the hub is reachable, or export "
                      "HF_HUB_OFFLINE=1 with the model cached, or a local folder)")]
    if r.status_code == 200:
        return [Check(field, f"{name} (hub)", "ok")]
    return [Check(field, repr(name), "fail",
                  f"is unknown to the hub ({endpoint}: HTTP {r.status_code}) (fix: check the id; a gated model "
                  "needs HF_TOKEN)")]


def endpoint(role: str, base_url: str | None, model: str | None, key_env: str, environ: Mapping[str, str],
             timeout_s: float = TIMEOUT_S) -> list[Check]:
    """``GET base_url/models`` with the key from ``$key_env`` (as the callers send it: "EMPTY" when unset):
    answers, accepts the key, and lists ``model``. ``role``: the spec section (executor, judge, sft.teacher)."""
    if not base_url:
        return []
    import httpx

    # a spec section names its fields (executor.base_url); a command's options name themselves (--base-url)
    url_f, model_f, key_f = ("--base-url", "--model", "--api-key-env") if role.startswith("--") else \
        (f"{role}.base_url", f"{role}.model", f"{role}.api_key_env")
    set_model = "--model" if role.startswith("--") else f"--set {role}.model="

    url = base_url.rstrip("/") + "/models"
    key = environ.get(key_env) or "EMPTY"
    try:
        r = httpx.get(url, timeout=timeout_s, headers={"Authorization": f"Bearer {key}"})
    except httpx.HTTPError as e:
        what = f"no answer within {timeout_s:g} s" if isinstance(e, httpx.TimeoutException) else \
            f"{type(e).__name__}: {str(e)[:120]}"
        return [Check(url_f, base_url, "fail",
                      f"does not answer (GET {url}: {what}) (fix: start the server, e.g. `vllm serve {model or 'MODEL'}`, or correct "
                      f"{url_f})")]
    if r.status_code in (401, 403):
        return [Check(key_f, base_url, "fail",
                      f"refused the key in ${key_env} (HTTP {r.status_code}) (fix: export {key_env}="
                      "<the server's --api-key>)")]
    if r.status_code != 200:
        return [Check(url_f, base_url, "fail",
                      f"answers HTTP {r.status_code} to GET {url} (fix: an OpenAI-compatible server's /v1 URL)")]
    try:
        served = [m["id"] for m in r.json().get("data", [])]
    except (ValueError, KeyError, TypeError, AttributeError):
        return [Check(url_f, base_url, "fail",
                      f"answers GET {url} with no OpenAI model list (fix: an OpenAI-compatible server's /v1 URL)")]
    if model and model not in served:
        return [Check(model_f, repr(model), "fail",
                      f"is not served at {base_url} (it serves {served}) (fix: {set_model}{' ' if set_model == '--model' else ''}{served[0] if served else 'NAME'}"
                      f", or serve {model} there)")]
    return [Check(url_f, f"{base_url} ({model})", "ok")]


def _local(where: str) -> str:
    return f"{where} local" if where.startswith("--") else f"--set {where}=local"


def ray_address(address: str | None, where: str = "--ray", timeout_s: float = TIMEOUT_S) -> list[Check]:
    """A Ray cluster's address accepts a TCP connection within ``timeout_s`` (Ray's own client would retry for
    minutes, printing only connection warnings). 'local' and 'auto' start or find a cluster here: not checked."""
    if not address or address in ("local", "auto"):
        return []
    host_port = address.split("://", 1)[-1].rstrip("/")
    host, _, port = host_port.rpartition(":")
    if not host:
        host, port = host_port, "10001" if address.startswith("ray://") else "6379"
    try:
        port_n = int(port)
    except ValueError:
        return [Check(where, repr(address), "fail", f"is not HOST:PORT (fix: e.g. 10.0.0.1:6379, or {_local(where)})")]
    try:
        with socket.create_connection((host, port_n), timeout=timeout_s):
            pass
    except OSError as e:
        what = f"no answer within {timeout_s:g} s" if isinstance(e, TimeoutError) else type(e).__name__
        return [Check(where, repr(address), "fail",
                      f"cannot be reached: no Ray cluster answers ({what}) (fix: `ray start --head` on the head node and "
                      f"its address here, or {_local(where)})")]
    return [Check(where, address, "ok")]
