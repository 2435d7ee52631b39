"""`twinrun compare`: paired statistics of checkpoint arms against a same-sweep baseline, and a stated,
tested verdict on whether two runs' checkpoint curves share a shape.

Inputs are either per-game arms (rows written by `twinrun sweep`: one row per game per arm) or published
per-checkpoint summaries (CSV ``run,checkpoint,n,successes[,b,c]``, ``run=<baseline>`` rows give the baseline).
Per-game arms support every statistic; summaries only those that counts support, and the output lists what was
skipped or approximated.

What is computed (the math lives in :mod:`twinrun.core.compare.stats` and
:mod:`twinrun.core.compare.clogit`, pure functions of arrays):
- per arm vs baseline: exact McNemar on the discordant games b, c; the lift (arm - baseline success rate over
  games measured in both) with a paired bootstrap CI over games; the minimum detectable effect at the stated
  power; Holm, Benjamini-Hochberg and Bonferroni within each declared family (default: one family per run).
- per run (its lifts over checkpoints): peak checkpoint and the bootstrap distribution of the argmax, strict
  sign changes of the lift (crossings of the baseline), final - peak, linear trend, Cochran's Q across
  checkpoints, the curve's reliability (share of between-checkpoint variance that is not sampling noise) and,
  when replicate arms exist, the test-retest correlation of the curve with its replicate.
- per pair of runs: Pearson and Spearman of per-checkpoint lifts with a bootstrap that resamples games jointly
  across all arms, noise ceilings, a run x checkpoint interaction test with game effects, and a verdict.

Unmeasured rows (infrastructure failures) are excluded from every denominator and counted; an arm with more
than `max_unmeasured_share` unmeasured rows is flagged. Arms from different sweeps or game lists are refused.

Modules: ``model`` (settings, tables), ``load`` (sweep arms, summary CSVs), ``stats`` and ``clogit`` (pure
statistics, no I/O), ``curves`` (per-run curves and pairs), ``verdict`` (the rule), ``games`` / ``summary`` (the two
kinds of input), ``render`` (JSON), ``synthetic`` (sweeps with a known truth).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from twinrun.core.compare.games import compare_games
from twinrun.core.compare.load import load_game_table, load_summary_csv
from twinrun.core.compare.model import ArmInfo, CompareError, CompareSettings, GameTable, SummaryTable
from twinrun.core.compare.render import COMPARE_SCHEMA_VERSION, to_json
from twinrun.core.compare.summary import SUMMARY_SKIPPED_ALWAYS, compare_summaries
from twinrun.core.compare.synthetic import synthetic_game_table
from twinrun.core.compare.verdict import AGREE, DIFFER, NO_EVIDENCE, verdict

__all__ = [
    "AGREE", "COMPARE_SCHEMA_VERSION", "DIFFER", "NO_EVIDENCE", "SUMMARY_SKIPPED_ALWAYS", "ArmInfo", "CompareError",
    "CompareSettings", "GameTable", "SummaryTable", "compare", "compare_games", "compare_summaries",
    "load_game_table", "load_summary_csv", "synthetic_game_table", "to_json", "verdict",
]


def compare(inputs: Sequence[str | Path], baseline: str = "baseline", settings: CompareSettings | None = None) -> dict[str, Any]:
    """Compare arms (sweep folders / arm JSONL) or published summaries (CSV) against `baseline`.

    Returns the JSON-able result (`--json` prints it; `write_report` renders it).
    """
    settings = settings or CompareSettings()
    if not inputs:
        raise CompareError("inputs: none given (fix: pass a sweep --out folder, arm .jsonl files or a summary .csv)")
    paths = [Path(p) for p in inputs]
    csvs = [p for p in paths if p.suffix.lower() == ".csv"]
    if csvs and len(csvs) != len(paths):
        raise CompareError("inputs: mix of summary CSVs and per-game arms (fix: compare one kind at a time)")
    if len(csvs) > 1:
        raise CompareError(f"inputs: {len(csvs)} summary CSVs (fix: put all runs and the baseline in one CSV)")
    if csvs:
        return compare_summaries(load_summary_csv(csvs[0], baseline), baseline, settings)
    return compare_games(load_game_table(paths), baseline, settings)
