"""The ScienceWorld agent-evaluation protocol (`twinrun eval-agent`) and its statistics.

Protocol (defaults; every one is a setting and is written into the results):
- the test variations: ``variations`` (200) drawn without replacement from the split's (task, variation) list
  with a fixed ``seed``; the same list for every arm, so arms pair per variation;
- ``passes`` (4) independent passes over that list; pass p plays variation v with sampling seed
  ``hash(seed, p, v)`` in *every* arm (common random numbers: the pairing is per game and per pass);
- the AgentGym ReAct conversation of :mod:`twinrun.core.sft_data` (instruction + action list, canned
  acknowledgement, one user turn per observation; the whole conversation is the context), temperature 0.4,
  at most 30 rounds (replies), 512 new tokens per reply, thinking off;
- an episode's **final score** is ScienceWorld's score after its last action, as is (it can be negative: the
  simulator gives -100 for a task failed irrecoverably); **success** is final score 100;
- per pass: **Avg@1** = mean final score / 100 over the measured variations (never clamped to [0, 1]) and the
  success rate; reported as mean ± sample std (ddof 1) over passes;
- between two arms: a **paired bootstrap** over variations of the per-variation mean over passes;
- the **template-copy share**: of all replies, the share whose action is literally one of the prompt's action
  *templates* (an entry of the action list with a placeholder like ``OBJ``/``LOC``, an alternative like
  ``open/close`` or an optional part like ``[on OBJ]``), e.g. ``open/close OBJ``: the simulator always rejects it;
- with/without-skill arms: the same games and seeds played with the executor's retrieved skills (BM25 top-k over
  the task description, from a curated or human-written repo folder) and without; paired per game, and written
  as sweep-style ``eval`` rows so ``twinrun compare`` reports them as a family.

Infrastructure failures (generation endpoint, simulator) make an episode ``unmeasured``: it leaves every
denominator and is counted, never scored as a failure.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from twinrun.core.errors import InfrastructureError, TwinrunError
from twinrun.core.records import SCHEMA_VERSION, Outcome, Provenance
from twinrun.core.sft_data import (
    REACT_ACK,
    first_observation_text,
    parse_action,
    sciworld_instruction,
)
from twinrun.core.trajectories import SkillCondition, TrajectoryRecord, Turn

SUCCESS_SCORE = 100.0

# ------------------------------------------------------------------------------------------------------------
# Settings and rows


class AgentEvalSettings(BaseModel):
    """The protocol's knobs (defaults = the protocol)."""

    model_config = ConfigDict(extra="forbid")
    passes: int = Field(4, ge=1)
    variations: int = Field(200, ge=1)
    seed: int = 0
    split: Literal["train", "dev", "test"] = "test"
    tasks: list[str] | None = None
    temperature: float = Field(0.4, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_rounds: int = Field(30, ge=1)
    max_tokens: int = Field(512, ge=1)
    thinking: bool = False
    skill_top_k: int = Field(5, ge=0)
    n_boot: int = Field(10_000, ge=100)

    def settings_hash(self) -> str:
        blob = json.dumps(self.model_dump(mode="json", exclude={"n_boot"}), sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


class AgentEpisodeRow(BaseModel):
    """One episode of one arm in one pass (episodes.jsonl)."""

    model_config = ConfigDict(extra="forbid")
    schema_version: int = SCHEMA_VERSION
    kind: Literal["agent_episode"] = "agent_episode"
    arm: str
    checkpoint: str
    skill_condition: SkillCondition | None = None
    skills_source: str | None = None
    pass_index: int
    game_id: str
    game_index: int
    task: str
    variation: int | None
    split: str
    outcome: Outcome
    unmeasured_reason: str | None = None
    final_score: float | None = None
    success: bool | None = None
    rounds: int = 0
    stopped: str | None = Field(None, description="done (simulator), rounds (max_rounds) or context (full)")
    actions: list[str | None] = Field(default_factory=list)
    template_copies: int = 0
    retrieved_skills: list[str] = Field(default_factory=list)
    seed: int
    wall_s: float = 0.0
    trajectory_id: str
    provenance: Provenance


# ------------------------------------------------------------------------------------------------------------
# Variations


def sample_games(games: Sequence[Any], n: int, seed: int) -> list[Any]:
    """``n`` games drawn without replacement with ``seed`` from the list sorted by game_id (so the draw does not
    depend on listing order); returned sorted by game_id. Fewer than ``n`` available: all of them."""
    pool = sorted(games, key=lambda g: g.game_id)
    if n >= len(pool):
        return pool
    pick = np.random.default_rng(seed).choice(len(pool), size=n, replace=False)
    return sorted((pool[i] for i in pick), key=lambda g: g.game_id)


def episode_seed(seed: int, pass_index: int, game_id: str) -> int:
    """The sampling seed of one (pass, game): identical across arms, so arms pair on the same random stream."""
    h = hashlib.sha256(f"{seed}|{pass_index}|{game_id}".encode()).digest()
    return int.from_bytes(h[:4], "little")


# ------------------------------------------------------------------------------------------------------------
# Template copying

_LISTED_ACTION = re.compile(r'"action"\s*:\s*"([^"]+)"')
_PLACEHOLDER_WORD = re.compile(r"\b[A-Z]{2,}\b")


def prompt_action_list(prompt: str) -> list[str]:
    """The actions a prompt lists as ``{"action": "..."}`` entries (AgentGym's format), in order."""
    return _LISTED_ACTION.findall(prompt)


def is_template(action: str) -> bool:
    """A listed action that is a pattern rather than a command: a placeholder word (OBJ, LOC), an alternative
    (``open/close``) or an optional part (``[on OBJ]``)."""
    return bool(_PLACEHOLDER_WORD.search(action)) or "/" in action or "[" in action


def normalize_action(action: str) -> str:
    return " ".join(action.strip().rstrip(".").lower().split())


def copied_template(action: str | None, templates: Sequence[str]) -> str | None:
    """The template ``action`` copies literally (case and spacing ignored), or None."""
    if action is None:
        return None
    a = normalize_action(action)
    for t in templates:
        if is_template(t) and normalize_action(t) == a:
            return t
    return None


def template_copy_counts(actions: Sequence[str | None], templates: Sequence[str]) -> tuple[int, int]:
    """(replies copying a template literally, replies). A reply without a parsable action counts as a reply."""
    return sum(copied_template(a, templates) is not None for a in actions), len(actions)


# ------------------------------------------------------------------------------------------------------------
# Statistics (pure, vectorised)


def avg_at_1(scores: np.ndarray) -> np.ndarray:
    """scores[P, V] final scores (NaN = unmeasured) -> Avg@1[P] = mean over measured variations of score / 100.

    Never clamped: a pass of -100 scores has Avg@1 -1."""
    with warnings.catch_warnings():  # an all-NaN pass (nothing measured) is NaN, which is what we want
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(np.asarray(scores, dtype=np.float64), axis=-1) / 100.0


def success_rate(scores: np.ndarray) -> np.ndarray:
    """scores[P, V] -> success[P]: share of measured variations with final score 100."""
    s = np.asarray(scores, dtype=np.float64)
    measured = ~np.isnan(s)
    wins = (np.nan_to_num(s, nan=-np.inf) >= SUCCESS_SCORE) & measured
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(measured.sum(-1) > 0, wins.sum(-1) / np.maximum(measured.sum(-1), 1), np.nan)


def mean_std(values: np.ndarray) -> tuple[float | None, float | None]:
    """values[P] (one per pass; NaN passes ignored) -> (mean, sample std with ddof 1; None for one pass)."""
    v = np.asarray(values, dtype=np.float64)
    v = v[~np.isnan(v)]
    if v.size == 0:
        return None, None
    return float(v.mean()), (float(v.std(ddof=1)) if v.size > 1 else None)


def per_variation_means(scores: np.ndarray) -> np.ndarray:
    """scores[P, V] -> [V]: mean over measured passes of score / 100 (NaN where no pass was measured)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(np.asarray(scores, dtype=np.float64), axis=0) / 100.0


def paired_bootstrap(a: np.ndarray, b: np.ndarray, *, n_boot: int = 10_000, seed: int = 0, level: float = 0.95
                     ) -> dict[str, Any]:
    """Paired bootstrap over variations of mean(a - b).

    a[V], b[V]: per-variation values of two arms (NaN = unmeasured; only variations measured in both pair).
    Resamples the V' paired differences with replacement ``n_boot`` times (one index matrix [R, V']).
    Returns mean difference, percentile CI at ``level``, and the two-sided bootstrap p-value
    ``min(1, 2 * min(P(d* <= 0), P(d* >= 0)))`` (1.0 when every difference is 0)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise TwinrunError(f"paired bootstrap: arms have {a.shape} and {b.shape} variations (fix: the same list)")
    mask = ~np.isnan(a) & ~np.isnan(b)
    d = (a - b)[mask]
    n = int(d.size)
    if n == 0:
        return {"n_pairs": 0, "diff": None, "ci": [None, None], "p_value": None, "level": level, "n_boot": n_boot}
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(n_boot, n))
    boots = d[idx].mean(axis=1)
    tail = (1.0 - level) / 2.0 * 100.0
    lo, hi = np.percentile(boots, [tail, 100.0 - tail])
    p = min(1.0, 2.0 * min(float((boots <= 0).mean()), float((boots >= 0).mean())))
    return {"n_pairs": n, "diff": float(d.mean()), "ci": [float(lo), float(hi)], "p_value": p, "level": level,
            "n_boot": n_boot}


# ------------------------------------------------------------------------------------------------------------
# One episode

GenerateFn = Callable[[list[dict[str, Any]], int], str]


class ContextFull(Exception):
    """The conversation no longer fits the model's context: the episode ends there (measured, as AgentGym
    does), it is not an infrastructure failure."""


@dataclass
class EpisodeResult:
    outcome: Outcome
    final_score: float | None
    rounds: int
    replies: list[str]
    actions: list[str | None]
    observations: list[str]
    first_observation: str
    instruction: str = ""
    unmeasured_reason: str | None = None
    wall_s: float = 0.0
    stopped: str = "done"  # "done" (the simulator ended it), "rounds" (max_rounds) or "context" (ContextFull)


def play_react_episode(env: Any, game: Any, generate: GenerateFn, *, instruction: str | Callable[[Any], str],
                       max_rounds: int, seed: int) -> EpisodeResult:
    """Play one game in the AgentGym conversation format. ``generate(messages, seed) -> reply``.

    ``instruction`` is the first user turn, or a function of the reset observation that returns it (the
    with-skill condition retrieves skills by the task description, known only after reset).

    Each round: the model replies to the whole conversation so far, the action after ``Action:`` goes to the
    simulator as is (an unparsable reply sends its first line), its observation becomes the next user turn.
    Ends when the simulator says done or after ``max_rounds`` replies."""
    t0 = time.monotonic()
    replies: list[str] = []
    actions: list[str | None] = []
    observations: list[str] = []
    first = ""
    score: float | None = None
    try:
        obs = env.reset(game)
        if callable(instruction):
            instruction = instruction(obs)
        first = first_observation_text(obs.task, obs.text)
        messages: list[dict[str, Any]] = [
            {"role": "user", "content": instruction},
            {"role": "assistant", "content": REACT_ACK},
            {"role": "user", "content": first},
        ]
        score = 0.0
        stopped = "rounds"
        for r in range(max_rounds):
            try:
                reply = generate(messages, seed + r)
            except ContextFull:
                stopped = "context"
                break
            action = parse_action(reply)
            replies.append(reply)
            actions.append(action)
            step = env.step(action if action is not None else (reply.strip().splitlines() or [""])[0])
            observations.append(step.observation.text)
            score = float(step.score)
            messages.append({"role": "assistant", "content": reply})
            if step.done:
                stopped = "done"
                break
            messages.append({"role": "user", "content": step.observation.text})
    except InfrastructureError as e:
        return EpisodeResult("unmeasured", None, len(replies), replies, actions, observations, first,
                             instruction if isinstance(instruction, str) else "",
                             unmeasured_reason=str(e)[:500], wall_s=time.monotonic() - t0)
    outcome: Outcome = "success" if score is not None and score >= SUCCESS_SCORE else "failure"
    return EpisodeResult(outcome, score, len(replies), replies, actions, observations, first, instruction,
                         wall_s=time.monotonic() - t0, stopped=stopped)


def episode_trajectory(result: EpisodeResult, *, record_id: str, game: Any, instruction: str, teacher: str,
                       skill_condition: SkillCondition | None) -> TrajectoryRecord:
    """The played episode as a trajectory record (reusable as SFT data: a model's own rollouts)."""
    turns = [Turn(role="user", content=instruction), Turn(role="assistant", content=REACT_ACK, loss=False),
             Turn(role="user", content=result.first_observation)]
    for i, reply in enumerate(result.replies):
        turns.append(Turn(role="assistant", content=reply))
        if i < len(result.replies) - 1 and i < len(result.observations):
            turns.append(Turn(role="user", content=result.observations[i]))
    return TrajectoryRecord(
        id=record_id, env=game.env, task=game.task_name or game.task_type, variation=game.variation,
        split=game.split, final_score=result.final_score,
        success=None if result.outcome == "unmeasured" else result.outcome == "success",
        teacher=teacher, skill_condition=skill_condition, turns=turns,
        meta={"outcome": result.outcome, "unmeasured_reason": result.unmeasured_reason, "stopped": result.stopped},
    )


def skills_instruction(base: str, skills_text: str) -> str:
    """The instruction turn with retrieved skills appended (the with-skill condition)."""
    return f"{base}\n\nSkills that may help with this task:\n{skills_text}"


# ------------------------------------------------------------------------------------------------------------
# Summaries


@dataclass
class ArmScores:
    """Scores of one arm: scores[P, V] (NaN unmeasured or not played), copies[P], replies[P]."""

    arm: str
    scores: np.ndarray
    copies: np.ndarray
    replies: np.ndarray
    unmeasured: int


def arm_scores(rows: Sequence[AgentEpisodeRow], arm: str, passes: int, n_games: int) -> ArmScores:
    scores = np.full((passes, n_games), np.nan)
    copies = np.zeros(passes)
    replies = np.zeros(passes)
    unmeasured = 0
    for r in rows:
        if r.arm != arm or r.pass_index >= passes:
            continue
        if r.outcome == "unmeasured":
            unmeasured += 1
            continue
        scores[r.pass_index, r.game_index] = r.final_score
        copies[r.pass_index] += r.template_copies
        replies[r.pass_index] += len(r.actions)
    return ArmScores(arm, scores, copies, replies, unmeasured)


def summarize_arm(s: ArmScores) -> dict[str, Any]:
    """Per-pass Avg@1, success and template-copy share, and their mean ± std over passes."""
    a1 = avg_at_1(s.scores)
    sr = success_rate(s.scores)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(s.replies > 0, s.copies / np.maximum(s.replies, 1), np.nan)
    m1, sd1 = mean_std(a1)
    ms, sds = mean_std(sr)
    mc, sdc = mean_std(share)
    return {
        "arm": s.arm,
        "passes": int(s.scores.shape[0]),
        "episodes_measured": int((~np.isnan(s.scores)).sum()),
        "episodes_unmeasured": s.unmeasured,
        "avg_at_1": {"mean": m1, "std": sd1, "per_pass": [None if np.isnan(x) else float(x) for x in a1]},
        "success": {"mean": ms, "std": sds, "per_pass": [None if np.isnan(x) else float(x) for x in sr]},
        "template_copy_share": {"mean": mc, "std": sdc,
                                "per_pass": [None if np.isnan(x) else float(x) for x in share]},
        "replies": int(s.replies.sum()),
        "template_copies": int(s.copies.sum()),
    }


def compare_arms(a: ArmScores, b: ArmScores, *, n_boot: int, seed: int) -> dict[str, Any]:
    """Paired bootstrap of arm a minus arm b over variations, on Avg@1 and on success."""
    va, vb = per_variation_means(a.scores), per_variation_means(b.scores)
    sa = _per_variation_success(a.scores)
    sb = _per_variation_success(b.scores)
    return {
        "a": a.arm, "b": b.arm,
        "avg_at_1": paired_bootstrap(va, vb, n_boot=n_boot, seed=seed),
        "success": paired_bootstrap(sa, sb, n_boot=n_boot, seed=seed),
        "unit": "variation (mean over passes)",
    }


def _per_variation_success(scores: np.ndarray) -> np.ndarray:
    s = np.asarray(scores, dtype=np.float64)
    measured = ~np.isnan(s)
    wins = ((np.nan_to_num(s, nan=-np.inf) >= SUCCESS_SCORE) & measured).sum(0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(measured.sum(0) > 0, wins / np.maximum(measured.sum(0), 1), np.nan)


def render_table(summaries: Sequence[dict[str, Any]], comparisons: Sequence[dict[str, Any]]) -> str:
    """The results table (plain text): one row per arm, then the paired comparisons."""
    from io import StringIO

    from rich.console import Console
    from rich.table import Table

    def pm(d: dict[str, Any], pct: bool = False) -> str:
        if d["mean"] is None:
            return "-"
        k = 100.0 if pct else 1.0
        sd = f" ± {d['std'] * k:.{1 if pct else 3}f}" if d["std"] is not None else ""
        return f"{d['mean'] * k:.{1 if pct else 3}f}{sd}"

    console = Console(record=True, width=160, file=StringIO())
    t = Table(title="agent evaluation (mean ± std over passes)")
    for c in ("arm", "passes", "measured", "unmeasured", "Avg@1", "success %", "template-copy %"):
        t.add_column(c, justify="left" if c == "arm" else "right")
    for s in summaries:
        t.add_row(s["arm"], str(s["passes"]), str(s["episodes_measured"]), str(s["episodes_unmeasured"]),
                  pm(s["avg_at_1"]), pm(s["success"], True), pm(s["template_copy_share"], True))
    console.print(t)
    if comparisons:
        c = Table(title="paired bootstrap over variations (a - b)")
        for col in ("a", "b", "pairs", "ΔAvg@1 [CI]", "p", "Δsuccess [CI]", "p"):
            c.add_column(col)
        for cmp in comparisons:
            x, y = cmp["avg_at_1"], cmp["success"]
            c.add_row(cmp["a"], cmp["b"], str(x["n_pairs"]), _ci(x), _p(x), _ci(y), _p(y))
        console.print(c)
    return console.export_text()


def _ci(x: dict[str, Any]) -> str:
    if x["diff"] is None:
        return "-"
    return f"{x['diff']:+.3f} [{x['ci'][0]:+.3f}, {x['ci'][1]:+.3f}]"


def _p(x: dict[str, Any]) -> str:
    return "-" if x["p_value"] is None else f"{x['p_value']:.3g}"


# ------------------------------------------------------------------------------------------------------------
# The run: arms x passes x games, resumable


@dataclass
class EvalArm:
    """One evaluated arm: a model (``generate``) and a skill condition.

    compare_group: the folder under ``out/compare/`` whose arms ``twinrun compare`` reads together;
    role/run/checkpoint_step: how the arm appears there (one baseline per group; run = the family)."""

    name: str
    checkpoint: str
    generate: GenerateFn
    skill_condition: SkillCondition | None = None
    skills: Any = None  # a SkillRepo for the with-skill condition
    skills_source: str | None = None
    compare_group: str = "models"
    role: Literal["baseline", "checkpoint"] = "checkpoint"
    run: str | None = None
    checkpoint_step: int | None = None
    checkpoint_hash: str | None = None


_INVALID_OBSERVATION = "no known action matches"


def run_agent_eval(env: Any, games: Sequence[Any], arms: Sequence[EvalArm], settings: AgentEvalSettings,
                   out_dir: str | Path, *, instruction: str | None = None, provenance_kw: dict[str, Any] | None = None,
                   progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Play every (pass, game, arm) not yet on record in ``out_dir`` and summarise.

    Writes ``episodes.jsonl`` (one :class:`AgentEpisodeRow` each), ``trajectories.jsonl`` (the conversations),
    ``compare/<group>/arms/<arm>.jsonl`` (sweep-style ``eval`` rows, pass p > 0 as replicate arms ``<arm>#r<p>``)
    and ``summary.json``. Resumes: complete rows are kept and their episodes are not replayed."""
    from twinrun.core.records import JsonlWriter, atomic_write_json, provenance, read_jsonl
    from twinrun.core.skills import render_for_prompt
    from twinrun.core.sweep import EvalRecord, games_hash

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    names = [a.name for a in arms]
    if len(set(names)) != len(names):
        raise TwinrunError(f"arms: duplicate names {names} (fix: give each checkpoint a distinct --label)")
    if not games:
        raise TwinrunError("variations: no games to play (fix: check --split/--task)")
    base_instruction = instruction if instruction is not None else sciworld_instruction()
    game_ids = [g.game_id for g in games]
    ghash = games_hash(game_ids)
    sweep_id = f"eval-agent-{settings.settings_hash()}-{ghash}"
    provs = {a.name: provenance(**{**(provenance_kw or {}), "checkpoint": a.checkpoint,
                                   "checkpoint_hash": a.checkpoint_hash}) for a in arms}

    ep_path, traj_path = out / "episodes.jsonl", out / "trajectories.jsonl"
    done = {(r["arm"], int(r["pass_index"]), r["game_id"]) for r in read_jsonl(ep_path)}
    traj_done = {r["id"] for r in read_jsonl(traj_path)}
    eval_paths = {a.name: out / "compare" / a.compare_group / "arms" for a in arms}
    eval_done: set[tuple[str, str]] = set()
    for folder in set(eval_paths.values()):
        for f in folder.glob("*.jsonl"):
            eval_done |= {(r["arm"], r["game_id"]) for r in read_jsonl(f)}

    ep_w, traj_w = JsonlWriter(ep_path), JsonlWriter(traj_path)
    eval_ws: dict[str, Any] = {}
    try:
        for p in range(settings.passes):
            for gi, game in enumerate(games):
                seed = episode_seed(settings.seed, p, game.game_id)
                for arm in arms:
                    if (arm.name, p, game.game_id) in done:
                        continue
                    retrieved: list[str] = []

                    def instruction_for(obs: Any, arm: EvalArm = arm, retrieved: list[str] = retrieved) -> str:
                        if arm.skill_condition != "with":
                            return base_instruction
                        skills = arm.skills.retrieve(obs.task or game.task_type, settings.skill_top_k)
                        retrieved.extend(s.name for s in skills)
                        return skills_instruction(base_instruction, render_for_prompt(skills))

                    result = play_react_episode(env, game, arm.generate, instruction=instruction_for,
                                                max_rounds=settings.max_rounds, seed=seed)
                    instr = result.instruction or base_instruction
                    templates = prompt_action_list(instr)
                    copies, _ = template_copy_counts(result.actions, templates)
                    tid = f"{arm.name}/pass{p}/{game.game_id}"
                    compare_arm = arm.name if p == 0 else f"{arm.name}#r{p}"
                    if (compare_arm, game.game_id) not in eval_done:
                        folder = eval_paths[arm.name]
                        w = eval_ws.get(compare_arm)
                        if w is None:
                            w = eval_ws[compare_arm] = JsonlWriter(folder / f"{_safe(compare_arm)}.jsonl")
                        w.write(EvalRecord(
                            game_id=game.game_id, task_type=game.task_type, outcome=result.outcome,
                            unmeasured_reason=result.unmeasured_reason, score=result.final_score,
                            steps=result.rounds, executor_calls=result.rounds,
                            invalid_actions=sum(o.strip().lower().startswith(_INVALID_OBSERVATION)
                                                for o in result.observations),
                            retrieved_skills=retrieved, wall_s=result.wall_s,
                            executor_settings_hash=settings.settings_hash(), sweep_id=sweep_id, arm=compare_arm,
                            role=arm.role, run=arm.run, checkpoint_step=arm.checkpoint_step, replicate=p,
                            game_index=gi, n_games=len(games), games_hash=ghash, provenance=provs[arm.name],
                        ))
                    if tid not in traj_done:
                        traj_w.write(episode_trajectory(result, record_id=tid, game=game, instruction=instr,
                                                        teacher=arm.checkpoint, skill_condition=arm.skill_condition))
                    ep_w.write(AgentEpisodeRow(
                        arm=arm.name, checkpoint=arm.checkpoint, skill_condition=arm.skill_condition,
                        skills_source=arm.skills_source, pass_index=p, game_id=game.game_id, game_index=gi,
                        task=game.task_name or game.task_type, variation=game.variation, split=game.split,
                        outcome=result.outcome, unmeasured_reason=result.unmeasured_reason,
                        final_score=result.final_score,
                        success=None if result.outcome == "unmeasured" else result.outcome == "success",
                        rounds=result.rounds, stopped=result.stopped, actions=result.actions,
                        template_copies=copies,
                        retrieved_skills=retrieved, seed=seed, wall_s=result.wall_s, trajectory_id=tid,
                        provenance=provs[arm.name],
                    ))
                    if progress:
                        progress(f"pass {p} {game.game_id} {arm.name}: {result.outcome} "
                                 f"score={result.final_score} rounds={result.rounds}")
    finally:
        ep_w.close()
        traj_w.close()
        for w in eval_ws.values():
            w.close()
    summary = summarize_run(out, arms, games, settings)
    summary["sweep_id"] = sweep_id
    summary["games_hash"] = ghash
    atomic_write_json(out / "summary.json", summary)
    return summary


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._#+-]", "_", name)


def summarize_run(out_dir: str | Path, arms: Sequence[EvalArm], games: Sequence[Any], settings: AgentEvalSettings
                  ) -> dict[str, Any]:
    """The table's numbers from episodes.jsonl: per-arm summaries and the paired comparisons (every arm against
    the first model's arm with the same skill condition, and with-skill against without-skill per model)."""
    from twinrun.core.records import read_jsonl

    rows = [AgentEpisodeRow.model_validate(r) for r in read_jsonl(Path(out_dir) / "episodes.jsonl")]
    scores = {a.name: arm_scores(rows, a.name, settings.passes, len(games)) for a in arms}
    summaries = [summarize_arm(scores[a.name]) for a in arms]
    comparisons = []
    first_by_condition: dict[Any, EvalArm] = {}
    for a in arms:
        ref = first_by_condition.setdefault(a.skill_condition, a)
        if ref is not a:
            comparisons.append(compare_arms(scores[a.name], scores[ref.name], n_boot=settings.n_boot,
                                            seed=settings.seed))
    by_model: dict[str, dict[Any, EvalArm]] = {}
    for a in arms:
        by_model.setdefault(a.checkpoint, {})[a.skill_condition] = a
    for conds in by_model.values():
        if "with" in conds and "without" in conds:
            comparisons.append(compare_arms(scores[conds["with"].name], scores[conds["without"].name],
                                            n_boot=settings.n_boot, seed=settings.seed))
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "agent_eval_summary",
        "settings": settings.model_dump(mode="json"),
        "games": [g.game_id for g in games],
        "arms": summaries,
        "comparisons": comparisons,
        "compare_groups": sorted({a.compare_group for a in arms}),
        "table": render_table(summaries, comparisons),
    }


# ------------------------------------------------------------------------------------------------------------
# Generators (models behind an arm). Frameworks are imported on first use.


class _ChatTemplateDefaults:
    """A tokenizer whose apply_chat_template defaults ``enable_thinking`` (thinking on/off for Qwen3)."""

    def __init__(self, tokenizer: Any, thinking: bool):
        self._tok = tokenizer
        self._thinking = thinking

    def apply_chat_template(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("enable_thinking", self._thinking)
        return self._tok.apply_chat_template(*args, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._tok(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tok, name)


def hf_generator(model_path: str, settings: AgentEvalSettings, *, device: str = "cpu") -> GenerateFn:
    """Local transformers generation through the executor's HF policy (twinrun.core.executors.HFPolicy), with
    the protocol's sampling settings and thinking on/off. Failures become InfrastructureError (unmeasured)."""
    from transformers import AutoConfig, AutoTokenizer

    from twinrun.core.executors import HFPolicy

    tok = _ChatTemplateDefaults(AutoTokenizer.from_pretrained(model_path), settings.thinking)
    policy = HFPolicy(model_path, temperature=settings.temperature, top_p=settings.top_p,
                      max_tokens=settings.max_tokens, device=device, tokenizer=tok)
    context = getattr(AutoConfig.from_pretrained(model_path), "max_position_embeddings", None)

    def generate(messages: list[dict[str, Any]], seed: int) -> str:
        if context is not None:
            prompt = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            if len(tok(prompt)["input_ids"]) + settings.max_tokens > context:
                raise ContextFull(f"prompt + {settings.max_tokens} new tokens exceed {context}")
        try:
            return policy.generate(messages, seed)
        except TwinrunError:
            raise
        except Exception as e:  # noqa: BLE001 - a crashed generation is infrastructure
            raise InfrastructureError(f"hf generation failed: {type(e).__name__}: {e}") from e

    return generate


def openai_generator(base_url: str, model: str, settings: AgentEvalSettings, *, api_key: str = "EMPTY",
                     loop: Any = None) -> GenerateFn:
    """An OpenAI-compatible endpoint (vLLM) through the executor's OpenAI policy: retries, timeouts,
    unmeasured on failure. Thinking is switched with vLLM's ``chat_template_kwargs``; the seed is sent."""
    from twinrun.core.executors import BackgroundLoop, OpenAIPolicy

    loop = loop or BackgroundLoop(name="twinrun-eval-agent")
    policy = OpenAIPolicy(base_url=base_url, model=model, api_key=api_key, temperature=settings.temperature,
                          top_p=settings.top_p, max_tokens=settings.max_tokens,
                          extra_body={"chat_template_kwargs": {"enable_thinking": settings.thinking}})

    def generate(messages: list[dict[str, Any]], seed: int) -> str:
        return loop.run(policy.complete(messages, seed=seed))

    return generate


def checkpoint_fingerprint(path: str | Path) -> str | None:
    """sha256[:16] over a checkpoint folder's file names, sizes and first MiB of each file (cheap, stable)."""
    p = Path(path)
    if not p.is_dir():
        return None
    h = hashlib.sha256()
    for f in sorted(x for x in p.iterdir() if x.is_file()):
        h.update(f.name.encode())
        h.update(str(f.stat().st_size).encode())
        with open(f, "rb") as fh:
            h.update(fh.read(1 << 20))
    return h.hexdigest()[:16]
