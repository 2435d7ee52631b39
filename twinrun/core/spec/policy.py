"""Spec sections of the rollout and the update: models, executor, judge, environment, reward, algorithm, batch,
optimizer, sampling, KL, clip, retrieval, skills, prompts and resources."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from twinrun.core.spec.base import ContextShape, Estimator, _Strict
from twinrun.core.spec.dtypes import Precision


class CuratorSpec(_Strict):
    """The trainable curator policy."""

    model: str = Field(description="HF model id or local path; 'tiny-qwen3' builds a random tiny model locally")
    max_prompt_tokens: int = Field(16384, gt=0, description="curator input (chi_i) limit per position")
    max_response_tokens: int = Field(4096, gt=0, description="one curator turn (tool calls) limit")
    max_completion_tokens: int = Field(
        32768,
        gt=0,
        description="context=accumulated only: the whole multi-turn completion after chi_1, every curator turn "
        "and every tool result (the next position's input). TRL max_completion_length, verl "
        "data.max_response_length; per_position rows are capped by max_response_tokens instead",
    )
    precision: Precision = Field("bf16", description="training precision: bf16 or fp32 (torch's bfloat16, float32 "
                                 "accepted and shown as bf16, fp32)")
    lora_rank: int = Field(0, ge=0, description="0 = full fine-tuning")
    max_missing_turn_share: float = Field(
        0.5, ge=0.0, le=1.0,
        description="stop a step when more of its positions than this were played without a curator turn "
        "(completion cap reached, or the curator stopped calling curate); 1.0 never stops",
    )
    context: ContextShape = Field(
        "per_position",
        description="what the curator sees at a position: per_position = one training row per (rollout, "
        "position) whose prompt is that position's own input (the paper's Markov curator); accumulated = one "
        "sequence per rollout, each turn and the next input appended (twinrun's earlier shape)",
    )
    history: int = Field(
        0, ge=0, description="per_position: earlier positions' (input, turn) pairs rendered before the current "
        "input as prompt-only messages (0 = the paper)",
    )

    @model_validator(mode="after")
    def _lengths(self) -> CuratorSpec:
        if self.max_completion_tokens < self.max_response_tokens:
            raise ValueError(
                f"curator.max_completion_tokens: {self.max_completion_tokens} is below max_response_tokens="
                f"{self.max_response_tokens} (fix: the whole multi-turn completion must hold at least one turn)"
            )
        if self.context == "accumulated" and self.history:
            raise ValueError(
                f"curator.history: {self.history} has no meaning with context=accumulated (the conversation "
                "already holds every earlier position; fix: history: 0, or context: per_position)"
            )
        return self

    @property
    def training_completion_tokens(self) -> int:
        """The completion cap of one training row: one turn (per_position) or the whole multi-turn
        completion (accumulated)."""
        return self.max_response_tokens if self.context == "per_position" else self.max_completion_tokens


# Request fields the spec owns (a free `extra_body` must not set them: the spec would say one value and the request
# carry another), and the decoding fields a spec may leave to the server.
EXECUTOR_REQUEST_FIELDS = ("model", "messages", "stream", "n", "temperature", "top_p", "max_tokens",
                           "max_completion_tokens", "top_k", "min_p", "presence_penalty", "repetition_penalty")
SERVER_DECIDED_FIELDS = ("top_k", "min_p", "presence_penalty", "repetition_penalty")


class ExecutorSpec(_Strict):
    """The frozen executor that plays the games with retrieved skills.

    Decoding: `temperature`, `top_p` and `max_tokens` are always sent. `top_k`, `min_p`, `presence_penalty` and
    `repetition_penalty` are sent only when set: null leaves them to the server (vLLM fills them from the model's
    generation_config.json under its default `--generation-config auto`; Qwen3-8B's says top_k 20), which is
    what twinrun did before these fields existed. Every episode records what its requests carried and, where the
    server reports it, what the server applied."""

    kind: Literal["scripted", "openai", "hf"]
    model: str | None = None
    base_url: str | None = Field(None, description="OpenAI-compatible endpoint (kind=openai)")
    api_key_env: str = Field("OPENAI_API_KEY", description="environment variable holding the endpoint key")
    temperature: float = Field(0.4, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int | None = Field(
        None, description="null = not sent (the server's default; vLLM: the model's generation_config.json); "
        "0 or -1 = off (vLLM before 0.7 accepts only -1); k >= 1 keeps the k likeliest tokens",
    )
    min_p: float | None = Field(None, ge=0.0, le=1.0, description="null = not sent (the server's default)")
    presence_penalty: float | None = Field(
        None, ge=-2.0, le=2.0, description="null = not sent (0 on vLLM); openai endpoints only"
    )
    repetition_penalty: float | None = Field(None, gt=0.0, description="null = not sent (the server's default)")
    extra_body: dict[str, Any] = Field(
        default_factory=dict,
        description="extra JSON fields of every executor request, e.g. chat_template_kwargs: {enable_thinking: "
        "false} for Qwen3 on vLLM; kind=hf applies only chat_template_kwargs",
    )
    max_tokens: int = Field(512, gt=0, description="tokens per executor turn")
    max_turns: int = Field(30, ge=1)
    history: int = Field(3, ge=0, description="(observation, action) pairs kept in the executor prompt")
    expert_prob: float = Field(1.0, ge=0.0, le=1.0, description="scripted: chance to play the expert action")
    skill_effect: float = Field(
        0.0, ge=0.0, le=1.0, description="scripted, ALFWorld: added to expert_prob times the retrieved skills' "
        "relevance to the game (twinrun.core.executors.skill_effect's rule); 0 = skills ignored",
    )
    self_judge_error: float = Field(
        0.0, ge=0.0, le=0.5, description="scripted: share of the rules self-judge's correctness verdicts that are "
        "wrong (curation.correctness: judged), flipped by a seeded hash of the spec seed, task and trajectory "
        "(core.correctness.RulesCorrectnessJudge); 0 = it always agrees with the environment",
    )
    concurrency: int = Field(32, ge=1, description="in-flight executor calls shared by all episodes of a step")
    timeout_s: float = Field(120.0, gt=0)
    retries: int = Field(3, ge=0)
    max_unmeasured_share: float = Field(
        0.2, ge=0.0, le=1.0, description="abort a step when more episodes than this are unmeasured"
    )

    @field_validator("top_k")
    @classmethod
    def _top_k(cls, v: int | None) -> int | None:
        if v is not None and v < -1:
            raise ValueError(f"{v} must be >= 1, 0 or -1 (off), or null (fix: null leaves it to the server)")
        return v

    @model_validator(mode="after")
    def _needs_endpoint(self) -> ExecutorSpec:
        if self.kind == "openai" and not self.base_url:
            raise ValueError("executor.base_url: None is required when executor.kind=openai (fix: set the vLLM server URL)")
        if self.kind in ("openai", "hf") and not self.model:
            raise ValueError(f"executor.model: None is required when executor.kind={self.kind} (fix: name the model)")
        return self

    @model_validator(mode="after")
    def _decoding_applies(self) -> ExecutorSpec:
        clash = [k for k in self.extra_body if k in EXECUTOR_REQUEST_FIELDS]
        if clash:
            own = "max_tokens" if clash[0] == "max_completion_tokens" else clash[0]
            fix = (f"set executor.{own} instead" if own in type(self).model_fields
                   else "remove it: twinrun sets it on every request")
            raise ValueError(f"executor.extra_body: key {clash[0]!r} is a field twinrun sets itself (fix: {fix})")
        if self.kind != "scripted" and self.skill_effect:
            raise ValueError(f"executor.skill_effect: {self.skill_effect} applies to executor.kind=scripted only "
                             "(fix: remove it)")
        if self.kind != "scripted" and self.self_judge_error:
            raise ValueError(f"executor.self_judge_error: {self.self_judge_error} applies to executor.kind=scripted "
                             "only (an endpoint judges itself; fix: executor.self_judge_error=0)")
        if self.kind == "scripted" and self.expert_prob + self.skill_effect > 1.0 + 1e-12:
            raise ValueError(f"executor.skill_effect: {self.skill_effect} with expert_prob {self.expert_prob} exceeds "
                             f"a chance of 1 (fix: at most {1 - self.expert_prob:g})")
        if self.kind == "scripted":
            for name in (*SERVER_DECIDED_FIELDS, "extra_body"):
                value = getattr(self, name)
                if value not in (None, {}):
                    raise ValueError(f"executor.{name}: {value!r} has no effect with executor.kind=scripted "
                                     "(fix: remove it, or use an openai or hf executor)")
        if self.kind == "hf":
            if self.presence_penalty is not None:
                raise ValueError(f"executor.presence_penalty: {self.presence_penalty} has no transformers equivalent "
                                 "for executor.kind=hf (fix: null, or use an openai executor)")
            other = [k for k in self.extra_body if k != "chat_template_kwargs"]
            if other:
                raise ValueError(f"executor.extra_body: key {other[0]!r} has no meaning for executor.kind=hf "
                                 "(fix: only chat_template_kwargs applies to local generation)")
        kwargs = self.extra_body.get("chat_template_kwargs")
        if kwargs is not None and not isinstance(kwargs, dict):
            raise ValueError(f"executor.extra_body.chat_template_kwargs: {kwargs!r} is not a mapping "
                             "(fix: e.g. {enable_thinking: false})")
        return self


class JudgeSpec(_Strict):
    """Content-quality judge for r_cnt.

    Decoding (kind=openai): `temperature` and `max_tokens` are always sent; `thinking` is sent only when set, as
    chat_template_kwargs.enable_thinking (null leaves it to the chat template: Qwen3 thinks), which is what twinrun
    did before these fields existed. `backoff_s` / `backoff_max_s` space the retries: they change when a verdict
    arrives, not what it says (so they are outside the judge's settings hash). Every rollout record names the
    request fields its judge sent and their hash."""

    kind: Literal["rules", "openai", "disabled"] = "rules"
    model: str | None = None
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    timeout_s: float = Field(120.0, gt=0)
    retries: int = Field(3, ge=0)
    temperature: float = Field(0.0, ge=0.0, le=2.0, description="judge decoding temperature (0 = greedy)")
    max_tokens: int = Field(
        2048, gt=0, description="tokens per judge answer (a thinking judge spends them on <think> first; an answer "
        "cut before its verdict is unmeasured)",
    )
    thinking: bool | None = Field(
        None, description="null = not sent (the chat template's default: Qwen3 thinks); true/false sends "
        "chat_template_kwargs: {enable_thinking: ...}",
    )
    backoff_s: float = Field(1.0, ge=0.0, description="retry n waits backoff_s * 2^(n-1), +-25% jitter")
    backoff_max_s: float | None = Field(None, gt=0.0, description="the longest one wait; null = no cap")
    min_steps: int = Field(
        2, ge=0, description="rules judge: list-item steps (`- `, `1. `) a skill's body needs to be VALID",
    )
    min_body_words: int = Field(
        0, ge=0, description="rules judge: words a skill's body needs to be VALID (0 = no minimum); the smoke arm "
        "judges on this because its warm-started curator writes one-sentence bodies (experiments/smoke-cpu.yaml)",
    )

    @model_validator(mode="after")
    def _needs_endpoint(self) -> JudgeSpec:
        if self.kind == "openai" and not (self.base_url and self.model):
            raise ValueError("judge.base_url: None is required when judge.kind=openai (fix: set base_url and model)")
        if self.kind != "openai" and self.thinking is not None:
            raise ValueError(f"judge.thinking: {self.thinking} has no effect with judge.kind={self.kind} "
                             "(fix: remove it, or use an openai judge)")
        if self.kind != "rules":
            for field in ("min_steps", "min_body_words"):
                if getattr(self, field) != type(self).model_fields[field].default:
                    raise ValueError(f"judge.{field}: {getattr(self, field)} is a rules-judge check and has no effect "
                                     f"with judge.kind={self.kind} (fix: remove it, or use judge.kind: rules)")
        if self.backoff_max_s is not None and self.backoff_max_s < self.backoff_s:
            raise ValueError(f"judge.backoff_max_s: {self.backoff_max_s} is below backoff_s={self.backoff_s} "
                             "(fix: a cap at least the first wait, or null for no cap)")
        return self


class CurationSpec(_Strict):
    """What the curator is shown between positions (core.correctness)."""

    correctness: Literal["judged", "ground_truth"] = Field(
        "judged",
        description="the correctness signal the curator reads: judged = the executor backbone judges its own "
        "trajectory (the paper; the scripted executor's rules stand-in on CPU), ground_truth = the environment's "
        "win/loss (leaks test labels into the repo during sweeps)",
    )
    sweep_correctness: Literal["judged", "ground_truth"] | None = Field(
        None, description="the signal in held-out sweeps; null = the same as curation.correctness"
    )

    @property
    def sweep(self) -> str:
        return self.sweep_correctness or self.correctness


ALFWORLD_TASK_TYPES = ("pick", "look", "clean", "heat", "cool", "pick2")


class EnvironmentSpec(_Strict):
    name: Literal["alfworld", "sciworld", "null_env"] = Field(
        ..., description="null_env: a stand-in without a game engine, for measuring the harness "
        "(core/envs/null.py, bench/train_concurrency.py --env null)")
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
    call_pooling: Literal["per_position", "pooled"] = Field(
        "per_position",
        description="r_fc / r_cnt as means over positions of Valid(c_i) / Judge(c_i) (the paper; a position with "
        "no op scores 0), or pooled over the rollout's calls / verdicts (twinrun's earlier reading; DIVERGENCES C2)",
    )
    churn_guard: bool = Field(
        False,
        description="r_fc and r_cnt count a write only if it survives its turn: an insert/update whose skill the same "
        "turn deletes, and that delete, are neither valid calls nor judged content (DIVERGENCES C13a); off = the "
        "paper's reward, which pays insert-then-delete churn above honest curation",
    )


class GigpoSpec(_Strict):
    """GiGPO (estimator: gigpo): which curator decisions share a step-level baseline (core.anchors) and how the
    two levels combine (core.advantages.gigpo)."""

    anchor: Literal["position_outcome", "position", "exact_input"] = Field(
        "position_outcome",
        description="step groups: (position, its game, the correctness the curator read there); (position, its game); "
        "or the exact curator input chi_i (diagnostics: nearly every group is a singleton)",
    )
    anchor_match: Literal["exact", "similarity"] = Field(
        "exact", description="similarity (anchor: exact_input only): cluster the curator input texts by difflib ratio"
    )
    similarity: float = Field(0.95, gt=0.0, le=1.0, description="anchor_match: similarity threshold on the real text")
    mode: Literal["mean_norm", "mean_std_norm"] = Field("mean_norm", description="std scaling at both levels or none")
    step_weight: float = Field(1.0, ge=0.0, description="omega: weight of the step-level advantage")
    gamma: float = Field(1.0, ge=0.0, le=1.0, description="step discount of the returns step groups compare")
    episode_pool: Literal["trajectory", "rows"] = Field(
        "trajectory",
        description="episode statistics over one return per rollout (the GiGPO paper's Eq. 3) or over every position "
        "row (verl-agent: rollouts weigh by length)",
    )
    anchor_singleton: Literal["zero", "raw", "mean0_std1"] = Field(
        "zero", description="A^S of a row alone in its anchor group: 0 (verl-agent), its return, or return/(1+eps)"
    )

    @model_validator(mode="after")
    def _match(self) -> GigpoSpec:
        if self.anchor_match == "similarity" and self.anchor != "exact_input":
            raise ValueError(
                f"algorithm.gigpo.anchor_match: similarity compares curator input texts, but anchor={self.anchor!r} "
                "(fix: anchor: exact_input, or anchor_match: exact)"
            )
        return self


class AlgorithmSpec(_Strict):
    estimator: Estimator = "grpo"
    scale: Literal["group", "batch", "none"] = Field(
        "none", description="std scaling of the group-centred reward; the paper's text: none"
    )
    eps: float = Field(1e-6, gt=0, description="added to the std before dividing")
    gigpo: GigpoSpec = Field(default_factory=lambda: GigpoSpec(), description="GiGPO's knobs (estimator: gigpo)")
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


class BM25Spec(_Strict):
    """BM25 scoring (bm25s 0.3.16's formulas). The paper says only "BM25"; these are bm25s's defaults."""

    k1: float = Field(1.5, ge=0.0, description="term-frequency saturation")
    b: float = Field(0.75, ge=0.0, le=1.0, description="document-length normalisation")
    variant: Literal["lucene", "robertson", "atire"] = Field(
        "lucene", description="bm25s method (idf and tf formulas). robertson = the original Okapi with idf "
        "floored at 0 (rank_bm25's BM25Okapi floors it at 0.25 x the mean idf instead)",
    )


class RetrievalSpec(_Strict):
    top_k: int = Field(5, ge=0)
    fields: list[Literal["name", "description", "body"]] = ["name", "description", "body"]
    bm25: BM25Spec = BM25Spec()


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
    correctness_judge: str | None = Field(
        None, description="prompt of the self-judge asked through the executor endpoint (curation.correctness: judged)"
    )




class ResourcesSpec(_Strict):
    nodes: int = Field(1, ge=1)
    gpus_per_node: int = Field(0, ge=0, description="0 = CPU")
    processes: int | None = Field(
        None, ge=1, description="training processes in all (TRL ranks, verl actor/rollout workers); default: "
        "nodes x gpus_per_node, one per node on CPU; on CPU any multiple of nodes (gloo), on GPU nodes x gpus_per_node")
    ray_address: str | None = None

    @model_validator(mode="after")
    def _processes_fit(self) -> ResourcesSpec:
        p = self.processes
        if p is None:
            return self
        if self.gpus_per_node and p != self.nodes * self.gpus_per_node:
            raise ValueError(f"resources.processes: {p} != nodes x gpus_per_node = {self.nodes * self.gpus_per_node} "
                             "(fix: one process per GPU; drop resources.processes or make them equal)")
        if p % self.nodes:
            raise ValueError(f"resources.processes: {p} is not a multiple of resources.nodes = {self.nodes} "
                             "(fix: the same number of processes on every node)")
        return self

    @property
    def world_size(self) -> int:
        """Training processes in all (the TRL launch's WORLD_SIZE, the verl actor/rollout workers)."""
        return self.processes or self.nodes * max(self.gpus_per_node, 1)

