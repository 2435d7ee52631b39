"""`twinrun plan`: compile one spec for every backend and say, knob by knob, whether the arms are the same.

No framework is imported: the backends' `compile_spec` functions are pure python. The plan refuses (exit 2)
when the realised per-step counts differ between backends; knobs that cannot be made equal are listed as
`divergent` with the reason (docs/advantage-semantics.md §9.2), never hidden.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from twinrun.backends import registry
from twinrun.backends.compiled import COUNT_NAMES, CompiledBackend, context_value
from twinrun.core.spec import ExperimentSpec
from twinrun.core.sweeps.placement import spec_sweep_cost


@dataclass(frozen=True)
class KnobRow:
    name: str
    neutral: Any
    settings: dict[str, str]  # backend -> native spelling
    status: str  # "equal" | "divergent"
    why: str


def neutral_values(spec: ExperimentSpec) -> dict[str, Any]:
    b, o, a = spec.batch, spec.optimizer, spec.algorithm
    return {
        "context": context_value(spec),
        "rollouts_per_group": b.rollouts_per_group,
        "groups_per_step": b.groups_per_step,
        "minibatches": b.minibatches,
        "epochs": b.epochs,
        "steps": spec.steps,
        "lr": o.lr,
        "schedule": o.schedule,
        "warmup_steps": o.warmup_steps,
        "weight_decay": o.weight_decay,
        "betas": tuple(o.betas),
        "grad_clip": o.grad_clip,
        "clip_low": spec.clip.low,
        "clip_high": spec.clip.high,
        "dual_clip_c": spec.clip.dual_clip_c,
        "kl_coef": spec.kl.coef,
        "kl_estimator": spec.kl.estimator,
        "entropy_coef": spec.entropy_coef,
        "temperature": spec.sampling.temperature,
        "top_p": spec.sampling.top_p,
        "top_k": spec.sampling.top_k,
        "advantage": a.estimator,
        "advantage_scale": a.scale,
        "loss_aggregation": a.loss_aggregation,
        "max_prompt_tokens": spec.curator.max_prompt_tokens,
        "max_response_tokens": spec.curator.max_response_tokens,
        "max_completion_tokens": spec.curator.max_completion_tokens,
        # precision: fp32 master weights in both backends, the spec's compute dtype, checkpoints at master precision
        "master_weights": "fp32",
        "compute_dtype": spec.curator.precision,
        "checkpoint_dtype": "fp32",
        "checkpoint_every": spec.checkpoint_every,
        "seed": spec.seed,
    }


def _correctness_source(spec: ExperimentSpec) -> str:
    if "judged" not in (spec.curation.correctness, spec.curation.sweep):
        return "the environment's outcome"
    if spec.executor.kind == "openai":
        return f"self-judge on the executor endpoint ({spec.prompts.correctness_judge})"
    return "rules stand-in (episode ended before the turn budget)"


def _anchor_text(spec: ExperimentSpec) -> str:
    g = spec.algorithm.gigpo
    match = f", similarity >= {g.similarity}" if g.anchor_match == "similarity" else ""
    return f"{g.anchor} ({g.anchor_match}{match})"


def structural_rows(spec: ExperimentSpec, backends: list[str]) -> list[KnobRow]:
    """Differences that no knob removes (docs/advantage-semantics.md §9.2), stated for this spec. Each backend
    spells its side through its registry entry (``structural``); a row it does not spell shows "(not mapped)"."""
    both = {b: "(framework)" for b in backends}
    per_position = spec.curator.context == "per_position"
    spelled = {b: registry.structural(b, spec) for b in backends}

    def native(row: str) -> dict[str, str]:
        return {b: spelled[b].get(row, "(not mapped)") for b in backends}

    rows = [
        KnobRow(
            "advantage_math", f"core {spec.algorithm.estimator}, eps={spec.algorithm.eps}",
            {b: "core.advantages.compute_advantages" for b in backends}, "equal",
            "both backends call the same core function (group stats, eps, singletons, unmeasured rollouts)",
        ),
        KnobRow(
            "reward_call_pooling", spec.reward.call_pooling, {b: "core.rewards.composite_reward" for b in backends},
            "equal", "per_position: r_fc/r_cnt are means over the |G| positions (the paper); pooled: over the calls made",
        ),
        KnobRow(
            "curator_correctness", f"{spec.curation.correctness} (sweeps: {spec.curation.sweep})",
            {b: _correctness_source(spec) for b in backends}, "equal",
            "the correctness signal the curator reads between positions (core.correctness)",
        ),
        KnobRow(
            "gigpo_anchor", _anchor_text(spec), {b: "core.anchors (the curation session keys each position)"
                                                 for b in backends}, "equal",
            "which curator decisions share a step baseline" + ("" if spec.algorithm.estimator == "gigpo"
                                                                 else "; unused: estimator is not gigpo"),
        ),
    ]
    if per_position:
        rows.append(KnobRow(
            "sample_unit", f"one row per (rollout, position): {spec.environment.group_size} per rollout",
            native("sample_unit"), "equal", "both train the prompt core renders for each position (its input and a window of "
            f"{spec.curator.history} earlier turns) and one curator turn; the loss weighs positions, not rollouts",
        ))
    else:
        rows.extend([
            KnobRow(
                "sample_unit", "one sequence per curation rollout",
                native("sample_unit"), "equal",
                "both train one sequence per rollout whose context accumulates every turn and tool result",
            ),
            KnobRow(
                "completion_overflow", spec.curator.max_completion_tokens,
                native("completion_overflow"), "divergent",
                "the frameworks end an over-long rollout differently; core still plays every position (finish())",
            ),
        ])
    rows += [
        KnobRow(
            "log_ratio_clamp", None, native("log_ratio_clamp"), "divergent",
            "verl clamps the log-ratio before exp; matters only for extreme off-policy tokens",
        ),
        KnobRow(
            "generation_numerics", None, both, "divergent",
            "different generation engines and kernels (TRL generate/vLLM colocate vs verl rollout server)",
        ),
        KnobRow(
            "sampling_rng", spec.seed, both, "divergent",
            "sampling seeds, uuids and shuffles cannot be aligned across engines: compare curves over seeds",
        ),
    ]
    if spec.algorithm.loss_aggregation == "seq_mean_token_sum":
        rows.append(KnobRow(
            "loss_normaliser", "seq_mean_token_sum",
            native("loss_normaliser"), "divergent", "verl's mode does not divide by the number of sequences",
        ))
    if spec.batch.minibatches > 1:
        rows.append(KnobRow(
            "minibatch_composition", spec.batch.minibatches,
            native("minibatch_composition"), "divergent", "which rollouts share an update differs when a step has more than one update",
        ))
    if spec.kl.coef > 0 and spec.algorithm.loss_aggregation != "token_mean":
        rows.append(KnobRow(
            "kl_placement", spec.kl.coef,
            native("kl_placement"), "divergent",
            "equal only under token-mean aggregation",
        ))
    return rows


# spec sections core runs the same way for every backend (the rollout: executor decoding, judge, retrieval)
ROLLOUT_SECTIONS = ("executor", "judge", "retrieval")


def _leaves(model: BaseModel, prefix: str) -> list[tuple[str, Any, str]]:
    """(dotted path, value, field description) of every leaf field; a free mapping (extra_body) is one leaf."""
    out: list[tuple[str, Any, str]] = []
    for name, info in type(model).model_fields.items():
        value = getattr(model, name)
        path = f"{prefix}.{name}"
        if isinstance(value, BaseModel):
            out.extend(_leaves(value, path))
        else:
            out.append((path, value, info.description or ""))
    return out


def rollout_knobs(spec: ExperimentSpec) -> list[dict[str, Any]]:
    """Every knob of the rollout sections with its value and source: the spec line (and the comment that cites
    it), a --set override, or the default (with what the default means)."""
    rows = []
    for section in ROLLOUT_SECTIONS:
        for path, value, description in _leaves(getattr(spec, section), section):
            origin = spec.origin(path)
            note = origin.note or (description if origin.source == "default" else "")
            rows.append({"name": path, "value": value, "source": origin.source, "note": note})
    return rows


def executor_calls_at_most(spec: ExperimentSpec, episodes: int) -> int:
    """Executor calls one training step can make: every episode playing executor.max_turns turns."""
    return episodes * spec.executor.max_turns


ABSENT = "(absent)"  # a key of a free mapping (extra_body, overrides) that one spec has and the other has not


def _flat(data: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted path -> leaf value; mappings are walked, so an empty one contributes nothing."""
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for k, v in data.items():
            out.update(_flat(v, f"{prefix}{k}."))
        return out
    return {prefix.rstrip("."): data}


def against(spec: ExperimentSpec, other: ExperimentSpec, backends: list[str]) -> dict[str, Any]:
    """Per-step counts of `spec` next to `other`'s for each backend, and every spec field whose value differs."""
    counts: dict[str, dict[str, Any]] = {}
    for label, s in (("this", spec), ("other", other)):
        for n in backends:
            c = dict(registry.compiler(n)(s).counts)
            c["executor_calls_at_most"] = executor_calls_at_most(s, c["executor_episodes"])
            counts[f"{label}:{n}"] = c
    mine, theirs = _flat(spec.model_dump(mode="json")), _flat(other.model_dump(mode="json"))
    skip = {"name"}
    differences = [
        {"name": k, "this": mine.get(k, ABSENT), "other": theirs.get(k, ABSENT), "source": spec.origin(k).source}
        for k in sorted(set(mine) | set(theirs)) if k not in skip and mine.get(k, ABSENT) != theirs.get(k, ABSENT)
    ]
    return {"spec": {"name": other.name, "hash": other.spec_hash()}, "counts": counts, "differences": differences}


def build_plan(spec: ExperimentSpec, backends: list[str] | None = None,
               other: ExperimentSpec | None = None) -> dict[str, Any]:
    """Return the plan as a JSON-able dict: backends' configs and counts, knob rows, the rollout knobs with their
    sources, counts_equal; with `other`, its per-step counts and the fields that differ (`against`)."""
    names = backends or list(spec.backends)
    compiled: dict[str, CompiledBackend] = {n: registry.compiler(n)(spec) for n in names}
    neutral = neutral_values(spec)
    rows: list[KnobRow] = []
    for knob, value in neutral.items():
        settings, reasons, realised = {}, [], []
        for n, c in compiled.items():
            ks = c.knobs.get(knob)
            if ks is None:
                settings[n] = "(not mapped)"
                reasons.append(f"{n} has no mapping for this knob")
                continue
            settings[n] = ks.setting
            realised.append(ks.value)
            if ks.divergence:
                reasons.append(f"{n}: {ks.divergence}")
            elif _norm(ks.value) != _norm(value):
                reasons.append(f"{n} realises {ks.value!r}, spec says {value!r} (an override?)")
        status = "divergent" if reasons else "equal"
        rows.append(KnobRow(knob, value, settings, status, "; ".join(reasons)))
    if len(names) > 1:
        rows.extend(structural_rows(spec, names))

    counts = {n: c.counts for n, c in compiled.items()}
    mismatched = [
        k for k in COUNT_NAMES if len({counts[n][k] for n in names}) > 1
    ]
    result = {
        "spec": {"name": spec.name, "hash": spec.spec_hash()},
        "backends": {n: c.to_json() for n, c in compiled.items()},
        "knobs": [
            {"name": r.name, "neutral": r.neutral, **{n: r.settings.get(n) for n in names}, "status": r.status, "why": r.why}
            for r in rows
        ],
        "rollout_knobs": rollout_knobs(spec),
        "counts_equal": not mismatched,
        "mismatched_counts": mismatched,
        # what sweeping every checkpoint of this spec's runs costs (docs/scale.md#sweeps-on-gpus)
        "sweep_cost": spec_sweep_cost(spec, gpus=spec.resources.gpus_per_node or None),
    }
    if other is not None:
        result["against"] = against(spec, other, names)
    return result


def _norm(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return tuple(_norm(x) for x in v)
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v
