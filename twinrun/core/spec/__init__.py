"""ExperimentSpec: one curator arm, in neutral units, compiled by each backend.

A spec says *what* to train (models, environment, reward, estimator, batch in task groups and rollouts,
optimiser, lengths) and never *how a framework spells it*. Backends derive their knobs from it
(`twinrun.backends.<name>.compile`) and `twinrun plan` refuses a spec whose realised per-step counts differ.

Errors are one line each: ``<field.path>: <value> <rule> (fix: ...)``; see :class:`SpecError`.

May import: errors (the bottom of core: every other concept package may import it).
"""


from twinrun.core.spec.base import SPEC_VERSION, Backend, ContextShape, Estimator, SpecError
from twinrun.core.spec.experiment import ExperimentSpec
from twinrun.core.spec.loading import apply_overrides, load_spec, spec_from_dict
from twinrun.core.spec.policy import (
    ALFWORLD_TASK_TYPES,
    AlgorithmSpec,
    BatchSpec,
    BM25Spec,
    ClipSpec,
    CurationSpec,
    CuratorSpec,
    EnvironmentSpec,
    ExecutorSpec,
    GigpoSpec,
    JudgeSpec,
    KLSpec,
    OptimizerSpec,
    PromptsSpec,
    ResourcesSpec,
    RetrievalSpec,
    RewardSpec,
    SamplingSpec,
    SkillsSpec,
)
from twinrun.core.spec.sft import TEACHER_PARAMS, GoldPathSpec, RoseSpec, SFTSpec, TeacherSpec
from twinrun.core.spec.sweep import SweepSpec
from twinrun.core.spec.tracking import TrackingSpec

__all__ = [
    "ALFWORLD_TASK_TYPES", "SPEC_VERSION", "TEACHER_PARAMS", "AlgorithmSpec", "apply_overrides", "Backend",
    "BatchSpec", "BM25Spec", "ClipSpec", "ContextShape", "CurationSpec", "CuratorSpec", "EnvironmentSpec",
    "Estimator", "ExecutorSpec", "ExperimentSpec", "GigpoSpec", "GoldPathSpec", "JudgeSpec", "KLSpec", "load_spec",
    "OptimizerSpec", "PromptsSpec", "ResourcesSpec", "RetrievalSpec", "RewardSpec", "RoseSpec", "SamplingSpec",
    "SFTSpec", "SkillsSpec", "spec_from_dict", "SpecError", "SweepSpec", "TeacherSpec", "TrackingSpec",
]
