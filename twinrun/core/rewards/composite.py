"""The SkillOS composite reward for one curation rollout, with every term's arithmetic on record.

    r = r_task + λ_f·r_fc + λ_u·r_cnt + λ_c·r_comp                      (paper §3.2.2; λ = 1.0, 0.1, 0.05)

* ``r_task``: success rate over positions 2..|G| (position 1 runs on an empty repo and is not scored).
  Unmeasured positions (infrastructure failed) leave numerator and denominator; a rollout with fewer than
  ``RewardSpec.min_measured_positions`` measured scored positions has ``total = None`` (unmeasured), never 0.
* ``r_fc = (1/|G|) Σ_i Valid(c_i)`` (``reward.call_pooling: per_position``, the paper): ``Valid(c_i)`` = valid ops /
  ops of position i's turn, **0 when position i made no op or had no turn** (``curate([])``, a turn without a call,
  a position the curator never reached). So stopping after one valid call earns ``1/|G|``, not 1.
* ``r_cnt = (1/|M|) Σ_{i∈M} Judge(c_i)``: ``Judge(c_i)`` = VALID verdicts / measured verdicts on the content
  position i wrote (successful inserts/updates), **0 when it wrote no content**. A verdict of None (judge
  unreachable or unparsable) is unmeasured: it leaves its own position's share only. A position whose content
  verdicts are *all* unmeasured has no Judge value and leaves the mean (M = the other positions); a position with
  some measured verdicts is judged on those. With every verdict measured, |M| = |G|: the paper's formula.
* ``r_comp``: mean over positions of ``1 - |S_i| / |χ_i|`` (repo tokens after the update over curator input
  tokens; not clipped, so a repo larger than the input is negative). Positions without counts are excluded.

``reward.call_pooling: pooled`` keeps twinrun's earlier reading (DIVERGENCES.md C2): r_fc = valid ops / all ops of
the rollout, r_cnt = VALID verdicts / measured verdicts of the rollout. A turn with no op adds nothing to either
denominator, which is the early-stop exploit the per-position reading closes.

``reward.churn_guard: true`` (off by default: the paper's reward) counts a write only if it survives its turn
(:func:`reverted_calls`): an insert/update whose skill the same turn deletes, and a delete of a skill the same turn
created, are neither valid calls for r_fc nor judged content for r_cnt (DIVERGENCES C13a). Without it, inserting and
deleting a skill at every position earns the full r_fc and r_cnt with an empty repo, which r_comp pays most.

A weight of None disables a term (recorded ``disabled``, not computed); 0.0 computes and records it unweighted.
A term whose denominator is 0 (pooled: no calls, nothing judged) has value None and contributes 0.

``step_rewards`` decomposes the total over curator turns (docs/advantage-semantics.md §8.2) so GiGPO can use it:
turn i gets the task success it precedes (ξ_{i+1}) / n_measured, and its own share of every other term (per
position: λ_f Valid(c_i)/|G|, λ_u Judge(c_i)/|M|, λ_c comp_i/n_comp; pooled: its valid ops / all ops, its VALID
verdicts / all measured verdicts). They sum to the total (to float rounding). With every position measured this
is §8.2's form ``r_i = 1(ξ_{i+1})/(|G|-1)·[i<|G|] + (λ_f Valid(c_i) + λ_u Judge(c_i) + λ_c(1-|S_i|/|χ_i|))/|G|``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from twinrun.core.errors import TwinrunError
from twinrun.core.records import SCHEMA_VERSION, Outcome
from twinrun.core.spec import RewardSpec

TermName = Literal["r_task", "r_fc", "r_cnt", "r_comp"]
TokenCounter = Callable[[str], int]


class RewardError(TwinrunError, ValueError):
    """Reward inputs that do not describe a rollout (one line: field, value, fix)."""


class PositionResult(BaseModel):
    """What one position of a curation rollout contributes to the reward.

    index: 1-based position; outcome: the executor episode at this position; calls_*: the curator's function
    calls (operations) after it; judged: one verdict per successful insert/update (None = unmeasured);
    content_ops: successful inserts/updates (None = ``len(judged)``: every content op was sent to a judge);
    repo_tokens: |S_i|, the repo after this turn's ops; curator_input_tokens: |χ_i|. Token counts None = not
    measured. calls_reverted: valid calls this turn undid itself (:func:`reverted_calls`); judged_reverted: per
    verdict, whether its content was deleted later in the turn (() = none was). Both count only under
    ``reward.churn_guard``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    index: int = Field(ge=1)
    outcome: Outcome
    calls_total: int = Field(0, ge=0)
    calls_valid: int = Field(0, ge=0)
    judged: tuple[bool | None, ...] = ()
    content_ops: int | None = Field(None, ge=0)
    repo_tokens: int | None = Field(None, ge=0)
    curator_input_tokens: int | None = Field(None, ge=1)
    calls_reverted: int = Field(0, ge=0)
    judged_reverted: tuple[bool, ...] = ()

    @model_validator(mode="after")
    def _calls(self) -> PositionResult:
        if self.calls_reverted > self.calls_valid:
            raise ValueError(f"calls_reverted: {self.calls_reverted} exceeds calls_valid={self.calls_valid} (fix: only "
                             "valid calls can be reverted)")
        if self.judged_reverted and len(self.judged_reverted) != len(self.judged):
            raise ValueError(f"judged_reverted: {len(self.judged_reverted)} flags for {len(self.judged)} verdicts (fix: "
                             "one flag per verdict, or () when none was reverted)")
        if self.calls_valid > self.calls_total:
            raise ValueError(
                f"calls_valid: {self.calls_valid} exceeds calls_total={self.calls_total} (fix: valid calls are a subset)"
            )
        if self.content_ops is not None and len(self.judged) > self.content_ops:
            raise ValueError(
                f"judged: {len(self.judged)} verdicts for content_ops={self.content_ops} (fix: one verdict per "
                "successful insert/update at most)"
            )
        return self

    def surviving(self) -> PositionResult:
        """This position as ``reward.churn_guard`` scores it: the calls and content its own turn undid removed."""
        if not self.calls_reverted and not any(self.judged_reverted):
            return self
        keep = [not r for r in self.judged_reverted] or [True] * len(self.judged)
        content = self.content_ops if self.content_ops is not None else len(self.judged)
        return self.model_copy(update={
            "calls_valid": self.calls_valid - self.calls_reverted, "calls_reverted": 0,
            "judged": tuple(v for v, k in zip(self.judged, keep) if k), "judged_reverted": (),
            "content_ops": content - sum(self.judged_reverted),
        })

    @property
    def wrote_content(self) -> bool:
        return (self.content_ops if self.content_ops is not None else len(self.judged)) > 0

    @property
    def valid_share(self) -> float:
        """Valid(c_i): valid ops / ops of this turn; 0 when the turn made no op (or there was no turn)."""
        return self.calls_valid / self.calls_total if self.calls_total else 0.0

    @property
    def judge_share(self) -> float | None:
        """Judge(c_i): VALID / measured verdicts on this turn's content; 0 when it wrote none; None when every
        verdict on its content is unmeasured (the position then leaves r_cnt's mean)."""
        if not self.wrote_content:
            return 0.0
        measured = [v for v in self.judged if v is not None]
        return sum(measured) / len(measured) if measured else None


class TermBreakdown(BaseModel):
    """One reward term: value = numerator / denominator (None if disabled or the denominator is 0);
    contribution = weight × value (0.0 when value is None)."""

    model_config = ConfigDict(extra="forbid")
    name: TermName
    weight: float | None
    disabled: bool
    value: float | None
    numerator: float | None
    denominator: int | None
    unmeasured: int = 0
    contribution: float = 0.0


class RewardBreakdown(BaseModel):
    """The reward of one curation rollout and how it was computed (a rollouts.jsonl field)."""

    model_config = ConfigDict(extra="forbid")
    schema_version: int = SCHEMA_VERSION
    total: float | None  # None = unmeasured rollout: excluded from advantages, counted
    r_task: TermBreakdown
    r_fc: TermBreakdown
    r_cnt: TermBreakdown
    r_comp: TermBreakdown
    positions: int  # |G|
    scored_positions: int  # |G| - 1
    measured_positions: int  # scored positions with a success/failure outcome
    unmeasured_positions: int  # scored positions that are unmeasured
    min_measured_positions: int
    call_pooling: Literal["per_position", "pooled"] = "per_position"
    step_rewards: list[float]  # per curator turn, sums to total; [] when total is None

    @property
    def unmeasured(self) -> bool:
        return self.total is None

    def terms(self) -> dict[str, float | None]:
        """Term values by name (for StepMetrics.reward_terms)."""
        return {t.name: t.value for t in (self.r_task, self.r_fc, self.r_cnt, self.r_comp)}


def _term(name: TermName, weight: float | None, num: np.ndarray, den: float, unmeasured: int) -> tuple[TermBreakdown, np.ndarray]:
    """A term from per-position numerators `num` [G] over one pooled denominator; returns the record and the
    per-position weighted shares [G] (zeros when disabled or undefined)."""
    G = num.shape[0]
    if weight is None:
        rec = TermBreakdown(name=name, weight=None, disabled=True, value=None, numerator=None, denominator=None)
        return rec, np.zeros(G)
    numerator = math.fsum(num.tolist())
    if den <= 0:
        rec = TermBreakdown(
            name=name, weight=weight, disabled=False, value=None, numerator=numerator, denominator=int(den), unmeasured=unmeasured
        )
        return rec, np.zeros(G)
    value = numerator / den
    rec = TermBreakdown(
        name=name,
        weight=weight,
        disabled=False,
        value=value,
        numerator=numerator,
        denominator=int(den),
        unmeasured=unmeasured,
        contribution=weight * value,
    )
    return rec, weight * num / den


def composite_reward(positions: Sequence[PositionResult], weights: RewardSpec) -> RewardBreakdown:
    """The composite reward of one rollout of |G| positions (indices exactly 1..|G|, any order).

    Shapes: positions [G]; step_rewards [G] (or [] when the rollout is unmeasured).
    """
    if not positions:
        raise RewardError("positions: [] is empty (fix: one PositionResult per position of the task group)")
    pos = sorted(positions, key=lambda p: p.index)
    G = len(pos)
    indices = [p.index for p in pos]
    if indices != list(range(1, G + 1)):
        raise RewardError(f"positions: indices {indices} are not 1..{G} (fix: one result per position, 1-based)")

    if weights.churn_guard:
        pos = [p.surviving() for p in pos]

    # r_task: the success at position i+1 is credited to curator turn i (the skills it wrote were used there)
    outcome = [p.outcome for p in pos]
    measured_next = np.array([outcome[i + 1] != "unmeasured" for i in range(G - 1)] + [False])
    success_next = np.array([outcome[i + 1] == "success" for i in range(G - 1)] + [False], dtype=float)
    n_measured = int(measured_next.sum())
    n_scored = G - 1
    task_rec, task_share = _term("r_task", 1.0, success_next, n_measured, n_scored - n_measured)
    rollout_measured = n_measured >= weights.min_measured_positions and n_measured > 0

    n_unjudged = sum(v is None for p in pos for v in p.judged)
    if weights.call_pooling == "pooled":  # twinrun's earlier reading: shares of the rollout's calls / verdicts
        valid = np.array([p.calls_valid for p in pos], dtype=float)
        fc_rec, fc_share = _term("r_fc", weights.lambda_fc, valid, sum(p.calls_total for p in pos), 0)
        valid_verdicts = np.array([sum(v is True for v in p.judged) for p in pos], dtype=float)
        n_verdicts = sum(v is not None for p in pos for v in p.judged)
        cnt_rec, cnt_share = _term("r_cnt", weights.lambda_cnt, valid_verdicts, n_verdicts, n_unjudged)
    else:  # the paper: means over positions of Valid(c_i) and Judge(c_i)
        fc_rec, fc_share = _term("r_fc", weights.lambda_fc, np.array([p.valid_share for p in pos]), G, 0)
        judge = [p.judge_share for p in pos]
        cnt_rec, cnt_share = _term("r_cnt", weights.lambda_cnt, np.array([j or 0.0 for j in judge]),
                                   sum(j is not None for j in judge), n_unjudged)

    has_counts = [p.repo_tokens is not None and p.curator_input_tokens is not None for p in pos]
    comp = np.array(
        [1.0 - p.repo_tokens / p.curator_input_tokens if ok else 0.0 for p, ok in zip(pos, has_counts)]  # type: ignore[operator]
    )
    n_comp = sum(has_counts)
    comp_rec, comp_share = _term("r_comp", weights.lambda_comp, comp, n_comp, G - n_comp)

    if rollout_measured:
        total: float | None = math.fsum([task_rec.contribution, fc_rec.contribution, cnt_rec.contribution, comp_rec.contribution])
        step = (task_share + fc_share + cnt_share + comp_share).tolist()
    else:
        total, step = None, []
    return RewardBreakdown(
        total=total,
        r_task=task_rec if rollout_measured else task_rec.model_copy(update={"value": None, "contribution": 0.0}),
        r_fc=fc_rec,
        r_cnt=cnt_rec,
        r_comp=comp_rec,
        positions=G,
        scored_positions=n_scored,
        measured_positions=n_measured,
        unmeasured_positions=n_scored - n_measured,
        min_measured_positions=weights.min_measured_positions,
        call_pooling=weights.call_pooling,
        step_rewards=step,
    )


# ------------------------------------------------------------------------------------------------------------
# Token counting for r_comp and building a PositionResult from one curator turn


def token_counter(tokenizer: Any) -> TokenCounter:
    """A text -> token count function from: a HF tokenizer (has ``encode``; special tokens excluded), a
    callable returning an int, or a callable returning a sequence of tokens."""
    if hasattr(tokenizer, "encode"):
        return lambda text: len(tokenizer.encode(text, add_special_tokens=False))
    if not callable(tokenizer):
        raise RewardError(f"tokenizer: {type(tokenizer).__name__} is not callable (fix: a HF tokenizer or text -> tokens)")

    def count(text: str) -> int:
        out = tokenizer(text)
        return int(out) if isinstance(out, (int, np.integer)) else len(out)

    return count


def whitespace_tokens(text: str) -> int:
    """A tokenizer-free count (whitespace-separated words) for tests and CPU smoke runs."""
    return len(text.split())


def reverted_calls(ops: Sequence[Any]) -> list[bool]:
    """Which of one turn's operation results (anything with ``ok``, ``function``, ``skill_name`` and, for a write,
    ``skill``: core.skills.OpResult) the same turn undid: a successful insert/update whose skill (under the name it
    then had) a later call of the turn deletes, and a successful delete of a skill the turn itself created. A delete
    of a skill that was there before the turn is a real change and is not flagged, nor are writes that a later update
    overwrites. Shapes: ops [n] -> [n]."""
    out = [False] * len(ops)
    writes: dict[str, list[int]] = {}  # name -> this turn's writes that made its current content
    created: set[str] = set()  # names this turn brought into the repo
    for j, o in enumerate(ops):
        if not getattr(o, "ok", False):
            continue
        fn, name = o.function, o.skill_name
        skill = getattr(o, "skill", None)
        if fn in ("new_skill_insert", "skill_update") and skill is not None:
            chain = writes.pop(name, []) if fn == "skill_update" else []
            writes[skill.name] = [*chain, j]
            if fn == "new_skill_insert" or name in created:
                created.discard(name)
                created.add(skill.name)
        elif fn == "skill_delete":
            for k in writes.pop(name, []):
                out[k] = True
            if name in created:
                out[j] = True
                created.discard(name)
    return out


def position_result(
    index: int,
    outcome: Outcome,
    ops: Iterable[Any],
    verdicts: Iterable[bool | None],
    *,
    repo_text: str | None,
    curator_input: str | None,
    count_tokens: TokenCounter | None,
) -> PositionResult:
    """Build a PositionResult from a turn's OpResults (anything with ``.ok``), the judge verdicts on its
    inserts/updates, and the texts r_comp compares (token counts None when no counter or no text)."""
    ops = list(ops)
    reverted = reverted_calls(ops)
    writes = [r for o, r in zip(ops, reverted) if getattr(o, "writes_content", False)]
    verdicts = tuple(verdicts)
    repo_tokens = curator_tokens = None
    if count_tokens is not None and repo_text is not None and curator_input is not None:
        repo_tokens = count_tokens(repo_text)
        curator_tokens = count_tokens(curator_input) or None  # an empty input cannot be a denominator
    return PositionResult(
        index=index,
        outcome=outcome,
        calls_total=len(ops),
        calls_valid=sum(1 for o in ops if o.ok),
        judged=verdicts,
        content_ops=len(writes),
        repo_tokens=repo_tokens if curator_tokens is not None else None,
        curator_input_tokens=curator_tokens,
        calls_reverted=sum(reverted),
        judged_reverted=tuple(writes) if any(writes) and len(writes) == len(verdicts) else (),
    )
