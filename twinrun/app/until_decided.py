"""`sweep --until-decided`: the sweep's looks (core.sweeps.until_decided) with compare's verdict under the
group-sequential rule (core.compare.looks) plugged in. Here because core's sweeps may not import compare."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from twinrun.core.compare import CompareSettings
from twinrun.core.compare.load import load_game_table
from twinrun.core.compare.looks import one_look
from twinrun.core.compare.sequential import SequentialRule
from twinrun.core.sweeps.plan import BASELINE, SweepError, parse_run_dirs
from twinrun.core.sweeps.until_decided import look_arms, plan_looks, run_looks


def sequential_rule(max_streams: int, per_look: int, futility_p: float = 0.5) -> SequentialRule:
    """The rule a sweep --until-decided plays under (its description is recorded in sweep.json and checked on
    resume)."""
    return SequentialRule(plan_looks(max_streams, per_look), futility_p=futility_p)


def sweep_until_decided(sweep: Callable[..., Any], spec: Any, run_dirs: list[str], out: Path, *, max_streams: int,
                        per_look: int, settings: CompareSettings | None = None, futility_p: float = 0.5,
                        log: Callable[[str], None] = lambda _: None, **sweep_kw: Any) -> dict[str, Any]:
    """Play `out` look by look (sweep(spec, run_dirs, out, streams=max_streams, arms=..., **sweep_kw) per look,
    local or Ray: each look's arms run in parallel as Ray tasks) -> the sequential record (also in sweep.json)."""
    rule = sequential_rule(max_streams, per_look, futility_p)
    looks = rule.looks
    settings = settings or CompareSettings(n_boot=2000, seed=spec.seed)
    runs = parse_run_dirs(run_dirs)

    def play(n: int) -> None:
        result = sweep(spec, run_dirs, out, streams=max_streams, arms=look_arms(runs, n), **sweep_kw)
        stopped = [a for a, o in getattr(result, "arms", {}).items() if getattr(o, "stopped", None)]
        if stopped:  # a look is read only when all its games were played
            raise SweepError(f"--until-decided: look of {n} streams incomplete: {len(stopped)} arm(s) stopped when "
                             f"their curator server went away ({', '.join(stopped)}) (fix: rerun the same command to "
                             "resume the look)")

    def take(j: int) -> dict[str, Any]:
        look, _ = one_look(load_game_table([out]), BASELINE, settings, rule, j)
        return look.to_dict()

    return run_looks(out, looks, rule.describe(), play, take, log=log)
