"""ExperimentSpec: one curator arm, in neutral units, compiled by each backend.

A spec says *what* to train (models, environment, reward, estimator, batch in task groups and rollouts,
optimiser, lengths) and never *how a framework spells it*. Backends derive their knobs from it
(`twinrun.backends.<name>.compile`) and `twinrun plan` refuses a spec whose realised per-step counts differ.

Errors are one line each: ``<field.path>: <value> <rule> (fix: ...)``; see :class:`SpecError`.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

SPEC_VERSION = 1

Backend = Literal["trl", "verl"]
Estimator = Literal["grpo", "dr_grpo", "rloo", "gigpo"]


from twinrun.core.errors import TwinrunError


class SpecError(TwinrunError, ValueError):
    """A spec that cannot be used; ``str(err)`` is one line naming field, value and fix."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False)


class CuratorSpec(_Strict):
    """The trainable curator policy."""

    model: str = Field(description="HF model id or local path; 'tiny-qwen3' builds a random tiny model locally")
    max_prompt_tokens: int = Field(16384, gt=0, description="curator input (chi_i) limit per position")
    max_response_tokens: int = Field(4096, gt=0, description="one curator turn (tool calls) limit")
    max_completion_tokens: int = Field(
        32768,
        gt=0,
        description="the whole multi-turn completion after chi_1: every curator turn and every tool result "
        "(the next position's input). TRL max_completion_length, verl data.max_response_length",
    )
    precision: Literal["bf16", "fp32"] = "bf16"
    lora_rank: int = Field(0, ge=0, description="0 = full fine-tuning")

    @model_validator(mode="after")
    def _lengths(self) -> CuratorSpec:
        if self.max_completion_tokens < self.max_response_tokens:
            raise ValueError(
                f"curator.max_completion_tokens: {self.max_completion_tokens} is below max_response_tokens="
                f"{self.max_response_tokens} (fix: the whole multi-turn completion must hold at least one turn)"
            )
        return self


class ExecutorSpec(_Strict):
    """The frozen executor that plays the games with retrieved skills."""

    kind: Literal["scripted", "openai", "hf"]
    model: str | None = None
    base_url: str | None = Field(None, description="OpenAI-compatible endpoint (kind=openai)")
    api_key_env: str = Field("OPENAI_API_KEY", description="environment variable holding the endpoint key")
    temperature: float = Field(0.4, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_tokens: int = Field(512, gt=0, description="tokens per executor turn")
    max_turns: int = Field(30, ge=1)
    history: int = Field(3, ge=0, description="(observation, action) pairs kept in the executor prompt")
    expert_prob: float = Field(1.0, ge=0.0, le=1.0, description="scripted: chance to play the expert action")
    concurrency: int = Field(32, ge=1, description="in-flight executor calls shared by all episodes of a step")
    timeout_s: float = Field(120.0, gt=0)
    retries: int = Field(3, ge=0)
    max_unmeasured_share: float = Field(
        0.2, ge=0.0, le=1.0, description="abort a step when more episodes than this are unmeasured"
    )

    @model_validator(mode="after")
    def _needs_endpoint(self) -> ExecutorSpec:
        if self.kind == "openai" and not self.base_url:
            raise ValueError("executor.base_url: None is required when executor.kind=openai (fix: set the vLLM server URL)")
        if self.kind in ("openai", "hf") and not self.model:
            raise ValueError(f"executor.model: None is required when executor.kind={self.kind} (fix: name the model)")
        return self


class JudgeSpec(_Strict):
    """Content-quality judge for r_cnt."""

    kind: Literal["rules", "openai", "disabled"] = "rules"
    model: str | None = None
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    timeout_s: float = Field(120.0, gt=0)
    retries: int = Field(3, ge=0)

    @model_validator(mode="after")
    def _needs_endpoint(self) -> JudgeSpec:
        if self.kind == "openai" and not (self.base_url and self.model):
            raise ValueError("judge.base_url: None is required when judge.kind=openai (fix: set base_url and model)")
        return self


ALFWORLD_TASK_TYPES = ("pick", "look", "clean", "heat", "cool", "pick2")


class EnvironmentSpec(_Strict):
    name: Literal["alfworld", "sciworld"]
    split: str = Field("valid_train", description="games that task groups are drawn from for training")
    eval_split: str = Field("valid_seen", description="held-out games for sweeps")
    eval_games: int | None = Field(
        None, ge=1, description="sweep on this many held-out games (a fixed, seeded, type-stratified subset); null = all"
    )
    task_types: list[str] | None = Field(None, description="None = all types, round-robin")
    group_size: int = Field(10, description="|G|: positions (tasks) per curation rollout")
    share_first_position: bool = Field(
        False, description="all rollouts of a group reuse one position-1 episode (common random numbers)"
    )
    workers: int = Field(2, ge=1, description="environment worker processes (textworld is not thread-safe)")

    @field_validator("group_size")
    @classmethod
    def _group(cls, v: int) -> int:
        if v < 2:
            raise ValueError(f"{v} must be >= 2 (position 1 is unscored, so |G|=1 has no reward; fix: use 2 or more)")
        return v

    @model_validator(mode="after")
    def _types(self) -> EnvironmentSpec:
        if self.name == "alfworld" and self.task_types:
            bad = [t for t in self.task_types if t not in ALFWORLD_TASK_TYPES]
            if bad:
                raise ValueError(
                    f"environment.task_types: {bad[0]!r} is not an ALFWorld task type "
                    f"(fix: one of {', '.join(ALFWORLD_TASK_TYPES)})"
                )
        return self


class RewardSpec(_Strict):
    """r = r_task + lambda_fc*r_fc + lambda_cnt*r_cnt + lambda_comp*r_comp. A weight of null disables a term
    explicitly (recorded as disabled); 0.0 computes and logs it without weight."""

    lambda_fc: float | None = 1.0
    lambda_cnt: float | None = 0.1
    lambda_comp: float | None = 0.05
    min_measured_positions: int = Field(
        1, ge=1, description="a rollout with fewer measured scored positions has an unmeasured r_task"
    )


class AlgorithmSpec(_Strict):
    estimator: Estimator = "grpo"
    scale: Literal["group", "batch", "none"] = Field(
        "none", description="std scaling of the group-centred reward; the paper's text: none"
    )
    eps: float = Field(1e-6, gt=0, description="added to the std before dividing")
    gamma: float = Field(1.0, ge=0.0, le=1.0, description="GiGPO step discount")
    step_weight: float = Field(1.0, ge=0.0, description="GiGPO omega: weight of the step-level advantage")
    gigpo_mode: Literal["mean_norm", "mean_std_norm"] = "mean_norm"
    anchor_match: Literal["exact", "similarity"] = "exact"
    similarity: float = Field(0.95, gt=0.0, le=1.0)
    invalid_penalty: float = Field(0.0, ge=0.0, description="subtracted from a curator turn with no valid call")
    loss_aggregation: Literal["token_mean", "seq_mean_token_mean", "seq_mean_token_sum"] = "token_mean"

    @model_validator(mode="after")
    def _dr(self) -> AlgorithmSpec:
        if self.estimator == "dr_grpo" and self.scale != "none":
            raise ValueError(
                f"algorithm.scale: {self.scale!r} contradicts estimator=dr_grpo (group mean only; fix: scale: none)"
            )
        return self


class BatchSpec(_Strict):
    """Neutral units. One training step = groups_per_step task groups x rollouts_per_group curation rollouts,
    each of |G| positions; split into `minibatches` optimizer updates, repeated `epochs` times."""

    groups_per_step: int = Field(ge=1)
    rollouts_per_group: int
    minibatches: int = Field(1, ge=1)
    epochs: int = Field(1, ge=1)
    micro_batch_per_device: int = Field(1, ge=1, description="sequences per forward/backward per device")

    @field_validator("rollouts_per_group")
    @classmethod
    def _n(cls, v: int) -> int:
        if v < 2:
            raise ValueError(f"{v} must be >= 2 (a GRPO group of one has no baseline; fix: use 2 or more, paper: 8)")
        return v

    @model_validator(mode="after")
    def _divides(self) -> BatchSpec:
        if self.groups_per_step % self.minibatches:
            raise ValueError(
                f"batch.minibatches: {self.minibatches} does not divide groups_per_step={self.groups_per_step} "
                "(fix: choose a divisor)"
            )
        return self

    @property
    def trajectories(self) -> int:
        return self.groups_per_step * self.rollouts_per_group


class OptimizerSpec(_Strict):
    lr: float
    schedule: Literal["constant", "linear", "cosine"] = "constant"
    warmup_steps: int = Field(0, ge=0)
    weight_decay: float = Field(0.01, ge=0.0)
    grad_clip: float = Field(1.0, gt=0.0)
    betas: tuple[float, float] = (0.9, 0.999)

    @field_validator("lr")
    @classmethod
    def _lr(cls, v: float) -> float:
        if not v > 0:
            raise ValueError(f"{v} must be > 0 (fix: a positive learning rate, paper: 1e-6)")
        return v


class SamplingSpec(_Strict):
    temperature: float = Field(1.0, gt=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int | None = Field(None, description="None = off")

    @field_validator("top_k")
    @classmethod
    def _k(cls, v: int | None) -> int | None:
        if v is not None and v < 1:
            raise ValueError(f"{v} must be >= 1 or null (fix: null turns top-k off)")
        return v


class KLSpec(_Strict):
    coef: float = Field(0.0, ge=0.0)
    estimator: Literal["k1", "k2", "k3"] = "k3"


class ClipSpec(_Strict):
    low: float = Field(0.2, gt=0.0, lt=1.0)
    high: float = Field(0.2, gt=0.0)
    dual_clip_c: float = Field(3.0, gt=1.0, description="verl cannot disable dual clip; TRL gets the same delta")


class RetrievalSpec(_Strict):
    top_k: int = Field(5, ge=0)
    fields: list[Literal["name", "description", "body"]] = ["name", "description", "body"]


class SkillsSpec(_Strict):
    max_content_chars: int = Field(20000, gt=0, description="bound on one SKILL.md a curator may write")
    max_skills: int = Field(200, gt=0)
    human_skills: str | None = Field(None, description="folder of human-written skills imported as immutable")


class PromptsSpec(_Strict):
    """Prompt files, relative to the spec file. Drop in the paper's exact text to reproduce it."""

    curator_system: str
    curator_input: str
    executor_system: str
    executor_input: str
    judge: str | None = None


class GoldPathSpec(_Strict):
    """The embedded default SFT data (issue 9): ScienceWorld gold-path episodes on training variations."""

    variations: int = Field(16, ge=1, description="training variations sampled (fixed seed) from the split")
    tasks: list[str] | None = Field(None, description="ScienceWorld task names; None = all 30")
    split: Literal["train", "dev", "test"] = "train"
    max_steps: int | None = Field(None, ge=1, description="cut each gold path after this many actions")


class SFTSpec(_Strict):
    """Trajectory SFT (issue 9) and the warm start of a tiny curator."""

    data: str | None = Field(None, description="trajectory file (jsonl/json), relative to the spec file")
    model: str | None = Field(None, description="model to fine-tune; None = curator.model")
    epochs: int = Field(1, ge=1)
    lr: float = Field(1e-5, gt=0)
    warmup_ratio: float = Field(0.1, ge=0.0, lt=1.0)
    schedule: Literal["constant", "linear", "cosine"] = "cosine"
    max_length: int = Field(2048, gt=0)
    batch_size: int = Field(8, ge=1, description="sequences per optimizer step (global)")
    micro_batch_size: int | None = Field(None, ge=1, description="sequences per forward/backward; None = batch_size")
    weight_decay: float = Field(0.0, ge=0.0)
    grad_clip: float = Field(1.0, gt=0.0)
    gold_path: GoldPathSpec = GoldPathSpec()

    @model_validator(mode="after")
    def _micro(self) -> SFTSpec:
        if self.micro_batch_size is not None and self.batch_size % self.micro_batch_size:
            raise ValueError(
                f"sft.micro_batch_size: {self.micro_batch_size} does not divide sft.batch_size={self.batch_size} "
                "(fix: choose a divisor)"
            )
        return self


class ResourcesSpec(_Strict):
    nodes: int = Field(1, ge=1)
    gpus_per_node: int = Field(0, ge=0, description="0 = CPU")
    ray_address: str | None = None


class ExperimentSpec(_Strict):
    version: Literal[1] = SPEC_VERSION
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]{0,63}$")
    curator: CuratorSpec
    executor: ExecutorSpec
    judge: JudgeSpec = JudgeSpec()
    environment: EnvironmentSpec
    reward: RewardSpec = RewardSpec()
    algorithm: AlgorithmSpec = AlgorithmSpec()
    batch: BatchSpec
    optimizer: OptimizerSpec
    sampling: SamplingSpec = SamplingSpec()
    kl: KLSpec = KLSpec()
    clip: ClipSpec = ClipSpec()
    entropy_coef: float = Field(0.0, ge=0.0)
    retrieval: RetrievalSpec = RetrievalSpec()
    skills: SkillsSpec = SkillsSpec()
    steps: int = Field(ge=1)
    checkpoint_every: int = Field(ge=1)
    seed: int = 0
    backends: list[Backend] = ["trl", "verl"]
    prompts: PromptsSpec
    sft: SFTSpec = SFTSpec()
    resources: ResourcesSpec = ResourcesSpec()
    overrides: dict[Backend, dict[str, Any]] = Field(
        default_factory=dict,
        description="raw framework knobs applied after compilation (escape hatch; plan re-derives counts from them)",
    )

    @model_validator(mode="after")
    def _cross(self) -> ExperimentSpec:
        if self.checkpoint_every > self.steps:
            raise ValueError(
                f"checkpoint_every: {self.checkpoint_every} exceeds steps={self.steps} "
                "(fix: checkpoint_every <= steps, or no checkpoint but the last is written)"
            )
        if not self.backends:
            raise ValueError("backends: [] is empty (fix: list trl, verl or both)")
        if len(set(self.backends)) != len(self.backends):
            raise ValueError(f"backends: {self.backends} has a duplicate (fix: list each backend once)")
        if self.judge.kind == "disabled" and self.reward.lambda_cnt is not None:
            raise ValueError(
                f"reward.lambda_cnt: {self.reward.lambda_cnt} needs a judge but judge.kind=disabled "
                "(fix: set reward.lambda_cnt: null to disable r_cnt, or choose a judge)"
            )
        return self

    # the folder the spec was read from: prompt paths are relative to it
    _source_dir: str = PrivateAttr(".")

    # --- derived ---------------------------------------------------------------------------------------------
    @property
    def source_dir(self) -> Path:
        return Path(self._source_dir)

    def prompt_path(self, which: str) -> Path:
        rel = getattr(self.prompts, which)
        if rel is None:
            raise SpecError(f"prompts.{which}: null is required here (fix: name a prompt file)")
        p = Path(rel)
        return p if p.is_absolute() else self.source_dir / p

    def read_prompt(self, which: str) -> str:
        p = self.prompt_path(which)
        try:
            return p.read_text(encoding="utf-8")
        except OSError as e:
            raise SpecError(f"prompts.{which}: {str(p)!r} cannot be read ({e.strerror}; fix: point it at a prompt file)")

    def canonical_json(self) -> str:
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))

    def spec_hash(self) -> str:
        """sha256 (first 16 hex) of the canonical spec; carried in every record as provenance."""
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()[:16]

    def episodes_per_rollout(self) -> int:
        return self.environment.group_size


# ------------------------------------------------------------------------------------------------------------
# Loading, overrides and one-line errors


def _all_field_paths(model: type[BaseModel], prefix: str = "") -> list[str]:
    out: list[str] = []
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        out.append(path)
        ann = info.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out.extend(_all_field_paths(ann, path + "."))
    return out


def _closest(path: str) -> str | None:
    candidates = _all_field_paths(ExperimentSpec)
    parent = path.rsplit(".", 1)[0] + "." if "." in path else ""
    siblings = [c for c in candidates if c.startswith(parent) and c.count(".") == path.count(".")]
    match = difflib.get_close_matches(path, siblings or candidates, n=1, cutoff=0.5)
    if not match:
        leaf = path.rsplit(".", 1)[-1]
        match = difflib.get_close_matches(leaf, [c.rsplit(".", 1)[-1] for c in candidates], n=1, cutoff=0.6)
        match = [m for m in candidates if m.endswith("." + match[0]) or m == match[0]][:1] if match else []
    return match[0] if match else None


_FULL_LINE = re.compile(r"^[a-z_][a-z0-9_]*(\.[a-z0-9_]+)*: ")
_BOUNDS = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}
_KINDS = {"model": "a section (mapping)", "dict": "a mapping", "float": "a number", "int": "an integer",
          "bool": "true or false", "string": "text", "list": "a list", "tuple": "a list"}


def _format_error(err: ValidationError) -> str:
    """The first validation error as one line: `field.path: value rule (fix: ...)`."""
    e = err.errors()[0]
    loc = ".".join(str(p) for p in e["loc"])
    msg = e["msg"].removeprefix("Value error, ")
    if e["type"] == "extra_forbidden":
        hint = _closest(loc)
        return f"{loc}: unknown key (fix: {f'did you mean {hint!r}?' if hint else 'remove it'})"
    if e["type"] == "missing":
        return f"{loc}: missing required field (fix: add it; see experiments/smoke-cpu.yaml)"
    if e["type"] == "value_error":
        # our validators write either a whole line (cross-field) or "<value> <rule> (fix: ...)"
        return msg if _FULL_LINE.match(msg) else f"{loc}: {msg}"
    ctx = e.get("ctx") or {}
    if "expected" in ctx:
        fix = f"one of {ctx['expected']}"
    elif any(k in ctx for k in _BOUNDS):
        fix = "use a value " + " and ".join(f"{_BOUNDS[k]} {v}" for k, v in ctx.items() if k in _BOUNDS)
    elif "pattern" in ctx:
        fix = f"match {ctx['pattern']}"
    elif e["type"].endswith("_type") or e["type"].endswith("_parsing"):
        fix = _KINDS.get(e["type"].split("_")[0], "see experiments/smoke-cpu.yaml")
    else:
        fix = "see experiments/smoke-cpu.yaml"
    return f"{loc}: {e.get('input')!r} is invalid: {msg} (fix: {fix})"


def _coerce(raw: str) -> Any:
    """`--set a.b=value` values are YAML scalars (so 1e-6, true, null, [a,b] work)."""
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError:
        return raw


def apply_overrides(data: dict[str, Any], sets: list[str]) -> dict[str, Any]:
    """Apply dotted `key.path=value` overrides to a raw spec dict (before validation)."""
    for item in sets:
        if "=" not in item:
            raise SpecError(f"--set: {item!r} is not key=value (fix: e.g. --set optimizer.lr=1e-6)")
        key, raw = item.split("=", 1)
        parts = key.strip().split(".")
        node = data
        for i, p in enumerate(parts[:-1]):
            nxt = node.get(p)
            if nxt is None:
                nxt = node[p] = {}
            if not isinstance(nxt, dict):
                raise SpecError(f"--set: {'.'.join(parts[: i + 1])} is not a section (fix: set a leaf field)")
            node = nxt
        node[parts[-1]] = _coerce(raw)
    return data


def spec_from_dict(data: dict[str, Any], source_dir: Path | None = None) -> ExperimentSpec:
    if not isinstance(data, dict):
        raise SpecError(f"spec: top level is {type(data).__name__}, not a mapping (fix: a YAML mapping of sections)")
    if "version" in data and data["version"] != SPEC_VERSION:
        raise SpecError(
            f"version: {data['version']!r} is not supported by this twinrun (fix: version: {SPEC_VERSION})"
        )
    try:
        spec = ExperimentSpec.model_validate(data)
    except ValidationError as err:
        raise SpecError(_format_error(err)) from None
    spec._source_dir = str(source_dir or Path.cwd())
    return spec


def load_spec(path: str | Path, sets: list[str] | None = None) -> ExperimentSpec:
    """Load a YAML spec, apply `--set` overrides, validate. Raises SpecError with a one-line message."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise SpecError(f"spec: {str(p)!r} cannot be read ({e.strerror}; fix: pass an existing YAML file)") from None
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise SpecError(f"spec: {str(p)!r}{where} is not valid YAML (fix: {getattr(e, 'problem', e)})") from None
    data = apply_overrides(data, sets or [])
    return spec_from_dict(data, p.resolve().parent)
