"""ROSE (online stitched SFT): one round's data, the same for whichever framework then trains on it.

Each round the current student plays a prefix of ``s`` replies on training variations; the teacher continues the
*same running episode* (the student's own state: its replies, the simulator's answers) for ``t`` replies; the
episode's record keeps the whole conversation, with loss on the teacher's replies only (the student's prefix is
context, ``loss: false``). The round's variations are a seeded draw from the training split (seed = hash of the
spec seed and the round), the sampling seed of a reply is ``hash(spec seed, round, game) + reply index``.

Both sides' replies are their visible text (a ``<think>`` block, or anything up to a stray ``</think>``, is
dropped: Qwen3's chat template would split a reply there). An episode the simulator ends inside the student's
prefix has no teacher reply: it is written (``teacher_turns:
0``) and carries no loss, so SFT drops it; an unmeasured episode (endpoint or simulator failure) is listed, not
written, and played again when the round is resumed. Nothing here knows which framework trains the student.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from twinrun.core.sft.agent_eval.episode import GenerateFn, Segment, episode_trajectory, play_stitched_episode
from twinrun.core.sft.agent_eval.protocol import episode_seed, sample_games
from twinrun.core.sft.teacher import episode_counts, finished_ids, visible_reply

STUDENT, TEACHER = "student", "teacher"


def round_seed(seed: int, round_index: int) -> int:
    return episode_seed(seed, round_index, "rose-round")


def round_games(games: Sequence[Any], n: int, seed: int, round_index: int) -> list[Any]:
    """Round ``round_index``'s training variations: ``n`` drawn without replacement (a fresh draw per round)."""
    return sample_games(games, n, round_seed(seed, round_index))


def rose_record_id(game: Any, round_index: int) -> str:
    return f"{game.env}/{game.game_id}/rose-round{round_index:02d}"


@dataclass
class RoundReport:
    written: int = 0
    skipped_existing: int = 0
    teacher_turns: int = 0
    student_turns: int = 0
    ended_in_prefix: int = 0
    unmeasured: list[str] = field(default_factory=list)


def collect_round(env: Any, games: Sequence[Any], out_path: str | Path, *, student: GenerateFn,
                  teacher: GenerateFn, student_turns: int, teacher_turns: int, round_index: int, seed: int,
                  instruction: str, literal: Sequence[str], student_name: str, teacher_name: str,
                  progress: Callable[[str], None] | None = None) -> RoundReport:
    """Play round ``round_index``: one stitched episode per game (student then teacher), appended to
    ``out_path`` (resumable: games on file are skipped). Returns the round's counts."""
    from twinrun.core.records import JsonlWriter

    out = Path(out_path)
    done = finished_ids(out)
    report = RoundReport()
    t0 = time.monotonic()

    def student_visible(messages: list[dict[str, Any]], seed: int) -> str:
        # the student's visible reply, as the teacher's: a stray "</think>" in an untrained student's output would
        # make Qwen3's chat template split the reply (and the SFT renderer refuse the record)
        return visible_reply(student(messages, seed))

    with JsonlWriter(out) as writer:
        for n, game in enumerate(games, 1):
            rid = rose_record_id(game, round_index)
            if rid in done:
                report.skipped_existing += 1
                continue
            segments = [Segment(STUDENT, student_visible, student_turns), Segment(TEACHER, teacher, teacher_turns)]
            res = play_stitched_episode(env, game, segments, instruction=instruction,
                                        seed=episode_seed(seed, round_index, game.game_id))
            if res.outcome == "unmeasured":
                report.unmeasured.append(f"{game.game_id}: {res.unmeasured_reason}")
                if progress:
                    progress(f"round {round_index} [{n}/{len(games)}] {game.game_id}: unmeasured")
                continue
            t_idx = [i for i, a in enumerate(res.authors) if a == TEACHER]
            taught = episode_counts([res.actions[i] for i in t_idx],
                                    [res.observations[i] for i in t_idx if i < len(res.observations)],
                                    instruction, literal)
            meta = {"round": round_index, "student": student_name, "student_turns": len(res.authors) - len(t_idx),
                    "teacher_turns": len(t_idx), "teacher_literal_copies": taught["literal_copies"],
                    "teacher_rejected_actions": taught["rejected_actions"]}
            rec = episode_trajectory(res, record_id=rid, game=game, instruction=instruction, teacher=teacher_name,
                                     skill_condition=None, trained_authors=[TEACHER], meta=meta)
            writer.write(rec)
            report.written += 1
            report.teacher_turns += len(t_idx)
            report.student_turns += meta["student_turns"]
            report.ended_in_prefix += not t_idx
            if progress:
                progress(f"round {round_index} [{n}/{len(games)}] {game.game_id}: student {meta['student_turns']} + "
                         f"teacher {len(t_idx)} replies, score={res.final_score:g} ({time.monotonic() - t0:.0f} s)")
    return report
