"""ExperimentSpec: the whole arm, its cross-field rules, provenance hash and prompt files."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, PrivateAttr, model_validator

from twinrun.core.spec.base import SPEC_VERSION, Backend, SpecError, _Strict, backend_names
from twinrun.core.spec.origins import FieldOrigin, SpecOrigins
from twinrun.core.spec.policy import (
    AlgorithmSpec, BatchSpec, ClipSpec, CurationSpec, CuratorSpec, EnvironmentSpec, ExecutorSpec, JudgeSpec, KLSpec,
    OptimizerSpec, PromptsSpec, ResourcesSpec, RetrievalSpec, RewardSpec, SamplingSpec, SkillsSpec,
)
from twinrun.core.spec.sft import SFTSpec
from twinrun.core.spec.sweep import SweepSpec
from twinrun.core.spec.tracking import TrackingSpec


# sections that say where results are shown or how checkpoints are measured, not what is trained: outside the spec
# hash and the training resume check (a sweep folder checks its own stream count: twinrun.core.sweeps.plan)
UNHASHED_SECTIONS = ("tracking", "sweep")


class ExperimentSpec(_Strict):
    version: Literal[1] = SPEC_VERSION
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]{0,63}$")
    curator: CuratorSpec
    executor: ExecutorSpec
    judge: JudgeSpec = JudgeSpec()
    curation: CurationSpec = CurationSpec()
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
    # the twin the harness exists for; a registered third backend is named explicitly (the default stays part of
    # every spec's hash, so registering one changes no spec)
    backends: list[Backend] = ["trl", "verl"]
    prompts: PromptsSpec
    sft: SFTSpec = SFTSpec()
    resources: ResourcesSpec = ResourcesSpec()
    tracking: TrackingSpec = Field(TrackingSpec(), description="where runs are shown (not part of the spec hash)")
    sweep: SweepSpec = Field(SweepSpec(), description="how the held-out sweep measures checkpoints: replicate "
                             "streams (not part of the spec hash)")
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
            raise ValueError(f"backends: [] is empty (fix: list {', '.join(backend_names()) or 'a backend'})")
        if len(set(self.backends)) != len(self.backends):
            raise ValueError(f"backends: {self.backends} has a duplicate (fix: list each backend once)")
        if self.judge.kind == "disabled" and self.reward.lambda_cnt is not None:
            raise ValueError(
                f"reward.lambda_cnt: {self.reward.lambda_cnt} needs a judge but judge.kind=disabled "
                "(fix: set reward.lambda_cnt: null to disable r_cnt, or choose a judge)"
            )
        if self.executor.skill_effect and self.environment.name != "alfworld":
            raise ValueError(
                f"executor.skill_effect: {self.executor.skill_effect} has a rule for ALFWorld task types only, not "
                f"environment.name={self.environment.name} (fix: skill_effect: 0)"
            )
        judged = "judged" in (self.curation.correctness, self.curation.sweep)
        if judged and self.executor.kind == "openai" and self.prompts.correctness_judge is None:
            raise ValueError(
                "prompts.correctness_judge: null but curation.correctness=judged asks the executor endpoint "
                "(fix: name the self-judge prompt file, or curation.correctness: ground_truth)"
            )
        return self

    # the folder the spec was read from: prompt paths are relative to it
    _source_dir: str = PrivateAttr(".")
    # where each value came from (spec file line and comment, --set, default); filled by load_spec
    _origins: SpecOrigins = PrivateAttr(default_factory=SpecOrigins)

    # --- derived ---------------------------------------------------------------------------------------------
    @property
    def source_dir(self) -> Path:
        return Path(self._source_dir)

    def origin(self, path: str) -> FieldOrigin:
        """Where the value at dotted `path` came from: "spec line N" (with its comment), "--set" or "default"."""
        return self._origins.of(path)

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
        """sha256 (first 16 hex) of the canonical spec less its ``tracking`` and ``sweep`` sections (where runs are
        shown and how many streams measure them is not what is trained: a run keeps its hash when it gains a
        dashboard or a stream); carried in every record."""
        body = self.model_dump(mode="json", exclude=set(UNHASHED_SECTIONS))
        return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]

    def episodes_per_rollout(self) -> int:
        return self.environment.group_size


