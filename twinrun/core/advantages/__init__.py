"""Advantage estimators as pure, vectorised numpy functions, plus named presets for each framework's semantics.

twinrun computes advantages once, here, so both backends train on the same numbers and `twinrun advdiff` can show
how far the frameworks' own defaults would drift apart on the same rewards. Reference:
`docs/advantage-semantics.md` (§1.2 verl GRPO, §3.4/§6 GiGPO, §4.2 TRL, §10 presets); every preset
below was checked against the installed trl 1.16.0 / verl 0.9.1 source (tests/backends/test_advantage_parity.py).

Shapes: ``B`` = rows. A row is one sample the policy is trained on: one rollout (GRPO over whole curation
sequences) or one (trajectory, step) pair (GiGPO, verl-agent style). Group ids, trajectory ids and anchors are any
hashable labels (str/int); they are factorised to integer codes with ``pandas.factorize`` (a C hash table), and all
statistics are ``np.bincount`` reductions over those codes, so no function loops over rows in Python. The two
exceptions are bounded and documented: the discounted return sweeps step *ranks* (max trajectory length iterations)
and similarity anchor matching compares distinct texts pairwise inside a group (difflib, O(n^2) per group).

Everything is float64. Both frameworks compute in float32, where an all-equal group of a non-dyadic reward (e.g.
eight 0.7s) has a mean that differs from the values by rounding, a std of ~1e-8 and, after ``/(std + eps)``,
advantages of about +-0.06 (verl, eps 1e-6) or +-6e-4 (TRL, eps 1e-4) instead of 0; twinrun gives 0 there
(tests/backends/test_advantage_parity.py states both artifacts).

Unmeasured rollouts (reward NaN, or None in the object-array input) are *excluded*: they do not enter any mean,
std or count (so a group of 8 with 2 unmeasured is a group of 6), and their advantage is exactly 0. This is TRL's
rule for unscorable completions; verl has no such notion (a NaN would poison its whole group), so twinrun never
hands verl a NaN: the `verl` preset equals verl run on the measured rows only.

The package splits by concept: :mod:`.arrays` (input checks, label codes, group statistics), :mod:`.step_groups`
(discounted returns, anchor step groups), :mod:`.estimators` (GRPO, Dr. GRPO, RLOO, GiGPO) and :mod:`.presets`
(EstimatorConfig, the presets, :func:`compute_advantages`). Every name, public or private, stays importable from
``twinrun.core.advantages``.

The training step's arithmetic lives here too: GiGPO anchors (:mod:`.anchors`), training rows (:mod:`.training_rows`),
step metrics and gates (:mod:`.step_metrics`, :mod:`.in_flight`, :mod:`.step_health`), replay batches for parity
(:mod:`.replay`) and `twinrun advdiff` (:mod:`.advdiff`). May import: errors, spec, records.
"""

from __future__ import annotations

from twinrun.core.advantages.arrays import (
    AdvantageInputError,
    AnchorMatch,
    GigpoMode,
    Pool,
    Scale,
    Singleton,
    _as_float,
    _check,
    _codes,
    _group_stats,
    _object_hashtable,
    _pool_members,
    _traj_codes,
)
from twinrun.core.advantages.estimators import _normalize, dr_grpo, gigpo, group_normalize, rloo
from twinrun.core.advantages.presets import (
    PRESETS,
    EstimatorConfig,
    Preset,
    _outcome,
    _presets,
    advantages_for_rows,
    as_torch,
    compute_advantages,
    estimator_config,
    with_knobs,
)
from twinrun.core.advantages.step_groups import (
    _anchor_codes,
    _discounted,
    _similarity_clusters,
    _steps,
    _traj_order,
    anchor_groups,
    discounted_returns,
)

__all__ = [
    "AdvantageInputError",
    "EstimatorConfig",
    "Preset",
    "PRESETS",
    "group_normalize",
    "dr_grpo",
    "rloo",
    "gigpo",
    "discounted_returns",
    "anchor_groups",
    "estimator_config",
    "compute_advantages",
    "advantages_for_rows",
    "with_knobs",
    "as_torch",
]

