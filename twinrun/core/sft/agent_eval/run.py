"""The run: arms x passes x games, resumable, and its summary (per-arm rows, paired comparisons, noise flags).

Comparisons made automatically (each a paired bootstrap over variations of the per-variation mean over passes):
- every arm against the first arm with the same skill condition (``kind: vs-first``);
- with-skill against without-skill for each model (``kind: skills``);
- **skill-free transfer** (SkillGym): each trained model *without* skills against the base model (the first
  model given) *with* skills (``kind: transfer``): does the training put into the weights what the skills give?
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from twinrun.core.sft.agent_eval.episode import GenerateFn, episode_trajectory, play_react_episode, skills_instruction
from twinrun.core.sft.agent_eval.protocol import AgentEpisodeRow, AgentEvalSettings, episode_seed
from twinrun.core.sft.agent_eval.stats import ArmScores, arm_scores, compare_arms, summarize_arm, within_noise
from twinrun.core.sft.agent_eval.table import render_table
from twinrun.core.errors import TwinrunError
from twinrun.core.records import SCHEMA_VERSION
from twinrun.core.sft.data import sciworld_instruction
from twinrun.core.sft.template_copy import literal_copy_counts, prompt_action_list, template_copy_counts
from twinrun.core.sft.trajectories import SkillCondition


@dataclass
class EvalArm:
    """One evaluated arm: a model (``generate``) and a skill condition.

    compare_group: the folder under ``out/compare/`` whose arms ``twinrun compare`` reads together;
    role/run/checkpoint_step: how the arm appears there (one baseline per group; run = the family);
    method/stage: the study table's row labels (a run's name and ``epoch k`` / ``round k``);
    base: the base model of a skill-free transfer comparison."""

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
    method: str | None = None
    stage: str | None = None
    base: bool = False


_INVALID_OBSERVATION = "no known action matches"


def run_agent_eval(env: Any, games: Sequence[Any], arms: Sequence[EvalArm], settings: AgentEvalSettings,
                   out_dir: str | Path, *, instruction: str | None = None, provenance_kw: dict[str, Any] | None = None,
                   progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Play every (pass, game, arm) not yet on record in ``out_dir`` and summarise.

    Writes ``episodes.jsonl`` (one :class:`AgentEpisodeRow` each), ``trajectories.jsonl`` (the conversations),
    ``compare/<group>/arms/<arm>.jsonl`` (sweep-style ``eval`` rows, pass p > 0 as replicate arms ``<arm>#r<p>``)
    and ``summary.json``. Resumes: complete rows are kept and their episodes are not replayed."""
    from twinrun.core.records import JsonlWriter, atomic_write_json, provenance, read_jsonl
    from twinrun.core.skills.repository import render_for_prompt
    from twinrun.core.sweeps.sweep import EvalRecord, games_hash

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
                    literal, _ = literal_copy_counts(result.actions, settings.literal_copies)
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
                        template_copies=copies, literal_copies=literal,
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
    """The table's numbers from episodes.jsonl: per-arm summaries (with the study-table labels and the
    re-evaluation-noise flag against the best arm) and the paired comparisons (see the module docstring)."""
    from twinrun.core.records import read_jsonl

    rows = [AgentEpisodeRow.model_validate(r) for r in read_jsonl(Path(out_dir) / "episodes.jsonl")]
    scores = {a.name: arm_scores(rows, a.name, settings.passes, len(games)) for a in arms}
    summaries = [summarize_arm(scores[a.name]) | {"method": a.method, "stage": a.stage} for a in arms]
    _flag_noise(summaries, scores, settings)

    def cmp(a: EvalArm, b: EvalArm, kind: str) -> dict[str, Any]:
        return compare_arms(scores[a.name], scores[b.name], n_boot=settings.n_boot, seed=settings.seed) | {
            "kind": kind}

    comparisons = []
    first_by_condition: dict[Any, EvalArm] = {}
    for a in arms:
        ref = first_by_condition.setdefault(a.skill_condition, a)
        if ref is not a:
            comparisons.append(cmp(a, ref, "vs-first"))
    by_model: dict[str, dict[Any, EvalArm]] = {}
    for a in arms:
        by_model.setdefault(a.checkpoint, {})[a.skill_condition] = a
    for conds in by_model.values():
        if "with" in conds and "without" in conds:
            comparisons.append(cmp(conds["with"], conds["without"], "skills"))
    base_with = [a for a in arms if a.base and a.skill_condition == "with"]
    for a in arms:
        if not a.base and a.skill_condition == "without":
            comparisons.extend(cmp(a, b, "transfer") for b in base_with)
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "agent_eval_summary",
        "settings": settings.model_dump(mode="json"),
        "games": [g.game_id for g in games],
        "arms": summaries,
        "comparisons": comparisons,
        "compare_groups": sorted({a.compare_group for a in arms}),
        "table": render_table(summaries, comparisons, literal_label=", ".join(settings.literal_copies)),
    }


def _flag_noise(summaries: list[dict[str, Any]], scores: dict[str, ArmScores], settings: AgentEvalSettings) -> None:
    """``noise`` per summary: ``best`` for the arm with the highest mean success, ``≈ best`` for arms within
    re-evaluation noise of it (:func:`~twinrun.core.sft.agent_eval.stats.within_noise`), ``below`` otherwise."""
    rated = [s for s in summaries if s["success"]["mean"] is not None]
    if len(rated) < 2:
        return
    best = max(rated, key=lambda s: s["success"]["mean"])
    best["noise"] = "best"
    for s in rated:
        if s is best:
            continue
        c = compare_arms(scores[s["arm"]], scores[best["arm"]], n_boot=settings.n_boot, seed=settings.seed)
        s["noise"] = "≈ best" if within_noise(s, best, c) else "below"
