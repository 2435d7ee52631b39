"""`twinrun compare`: paired statistics of checkpoint arms against a same-sweep baseline, and a stated,
pre-registered verdict on whether two runs' (or two frameworks') checkpoint curves share a shape.

Inputs are either per-game arms (rows written by `twinrun sweep`: one row per game per arm) or published
per-checkpoint summaries (CSV ``run,checkpoint,n,successes[,b,c][,framework,seed][,executor]``; ``run=<baseline>``
rows give the baseline). Per-game arms support every statistic; summaries only those that counts support, and the
output lists what was skipped or approximated.

What is computed (the stream is the unit of evidence: see :mod:`.streams` and docs/compare.md):
- streams: each (run, checkpoint) cell holds one arm per stream (the arm's ``replicate``); with >= 2 streams the
  intra-stream correlation and the design effect with intervals, and every statistic below against the variance
  between streams; with one stream per arm, per-arm p-values conditional on the stream and no shape claim unless
  the user states the correlation (``stream_icc``), which then adds its stream variance to every variance.
- per cell vs baseline: Welch t of the stream lifts (streams) or exact McNemar on the discordant games b, c (one
  stream); the lift (arm - pooled baseline success rate over games measured in both) with its CI; Holm,
  Benjamini-Hochberg and Bonferroni within each multiplicity family (``run``, ``all`` or ``custom``, with its size);
  the minimum detectable lift at the family's per-arm level.
- per run (its lifts over checkpoints): peak checkpoint and the distribution of the argmax, strict sign changes of
  the lift (crossings of the baseline), final vs peak without the winner's curse, linear trend, the checkpoint
  effect (one-way F against the stream variance; Cochran's Q with one stream), shape noise and reliability, and a
  split-half test-retest correlation of the curve over its streams.
- per pair of runs: Pearson and Spearman of per-checkpoint lifts (and Pearson on linearly detrended lifts) with
  intervals from the noise model, noise ceilings, a run x checkpoint interaction test on the success-rate scale,
  the pointwise equivalence band of the centred curves, and the verdict (see :mod:`.verdict`; Holm over pairs)
  with the games per stream and streams that would decide.
- per pair of frameworks (runs grouped by backend and training seed): the framework verdict against the seeds'
  own variation (sphericity-corrected split-plot F), or the plain statement that one run per framework confounds
  framework with seed.
- across executors (``across="executor"``): each sweep against its own baseline, and the transfer of lifts.

Unmeasured rows (infrastructure failures) are excluded from every denominator and counted; an arm with more
than `max_unmeasured_share` unmeasured rows is flagged. Arms from different sweeps or game lists are refused,
unless the comparison is across executors.

Modules: ``model`` (settings, tables), ``load`` (sweep arms, summary CSVs), ``stats``, ``shape``, ``power`` and
``streams`` (pure statistics, no I/O), ``families`` (multiplicity), ``curves`` (per-run curves and pairs),
``verdict`` (the rule), ``frameworks`` (seeds), ``games`` / ``summary`` (the two kinds of input), ``transfer``
(across executors), ``render`` (JSON), ``synthetic`` (sweeps with a known truth, the planted cases). Importing
the package loads ``model`` alone (the CLI builds compare's options from ``CompareSettings`` at start-up); the
names below from the other modules load on first use.

The report, its figures, the model card and what a tracker shows live here too (:mod:`.report` with its first
screen :mod:`.first_screen`, tables :mod:`.report_tables`, page :mod:`.report_html` and words :mod:`.glossary`;
:mod:`.console`, :mod:`.plots`, :mod:`.card`, :mod:`.track_results`). May import: errors, spec, records, envs, executors, skills, rewards,
advantages, curation, sweeps.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from twinrun.core.compare.model import ArmInfo, CompareError, CompareSettings, GameTable, SummaryTable

if TYPE_CHECKING:
    from twinrun.core.compare.games import analyse_games, compare_games
    from twinrun.core.compare.load import load_game_table, load_game_tables, load_summary_csv, load_summary_tables
    from twinrun.core.compare.render import COMPARE_SCHEMA_VERSION, to_json
    from twinrun.core.compare.summary import SUMMARY_SKIPPED_ALWAYS, analyse_summaries, compare_summaries
    from twinrun.core.compare.synthetic import synthetic_game_table
    from twinrun.core.compare.transfer import compare_across
    from twinrun.core.compare.verdict import AGREE, CO_MOVE, DIFFER, NO_EVIDENCE, VERDICTS, decide

__all__ = [
    "AGREE", "CO_MOVE", "COMPARE_SCHEMA_VERSION", "DIFFER", "NO_EVIDENCE", "VERDICTS", "decide", "SUMMARY_SKIPPED_ALWAYS", "ArmInfo", "CompareError",
    "CompareSettings", "GameTable", "SummaryTable", "compare", "compare_games", "compare_summaries",
    "compare_across", "load_game_table", "load_game_tables", "load_summary_csv", "load_summary_tables", "synthetic_game_table", "to_json",
]

# Names loaded on first use: the statistics modules pull scipy, and the CLI imports the settings (.model) at
# start-up to build compare's options from them, so importing this package must stay as light as .model
_LAZY = {
    "analyse_games": "games", "compare_games": "games",
    "load_game_table": "load", "load_game_tables": "load", "load_summary_csv": "load", "load_summary_tables": "load",
    "COMPARE_SCHEMA_VERSION": "render", "to_json": "render",
    "SUMMARY_SKIPPED_ALWAYS": "summary", "analyse_summaries": "summary", "compare_summaries": "summary",
    "synthetic_game_table": "synthetic", "compare_across": "transfer",
    "AGREE": "verdict", "CO_MOVE": "verdict", "DIFFER": "verdict", "NO_EVIDENCE": "verdict", "VERDICTS": "verdict",
    "decide": "verdict",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    globals()[name] = value  # once: later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


def compare(inputs: Sequence[str | Path], baseline: str = "baseline", settings: CompareSettings | None = None) -> dict[str, Any]:
    """Compare arms (sweep folders / arm JSONL) or published summaries (CSV) against `baseline`; with
    ``settings.across`` several sweeps (or the executor column of one CSV), each against its own baseline, and the
    transfer of lifts between them.

    Returns the JSON-able result (`--json` prints it; `write_report` renders it; docs/compare-json.md documents it).
    """
    from twinrun.core.compare.games import analyse_games, compare_games
    from twinrun.core.compare.load import load_game_table, load_game_tables, load_summary_csv, load_summary_tables
    from twinrun.core.compare.summary import analyse_summaries, compare_summaries
    from twinrun.core.compare.transfer import compare_across

    settings = settings or CompareSettings()
    if not inputs:
        raise CompareError("inputs: none given (fix: pass a sweep --out folder, arm .jsonl files or a summary .csv)")
    paths = [Path(p) for p in inputs]
    csvs = [p for p in paths if p.suffix.lower() == ".csv"]
    if csvs and len(csvs) != len(paths):
        raise CompareError("inputs: mix of summary CSVs and per-game arms (fix: compare one kind at a time)")
    if len(csvs) > 1:
        raise CompareError(f"inputs: {len(csvs)} summary CSVs (fix: put all runs and the baseline in one CSV)")
    if settings.across:
        if csvs:
            tables = load_summary_tables(csvs[0], baseline)
            if any(t.executor is None for t in tables):
                raise CompareError(f"{csvs[0]}: --across executor needs an executor column (fix: add it, one baseline "
                                   "row per executor)")
            return compare_across([(str(t.executor), analyse_summaries(t, baseline, settings)) for t in tables], settings)
        game_tables = load_game_tables(paths, several=True, games_hash=settings.games_hash,
                                       stream_design=settings.stream_design)
        for t in game_tables:
            if t.executor is None:
                raise CompareError(f"sweep {t.sweep_id!r} records no executor name (fix: sweep it with --executor NAME, "
                                   "or an executor.model in the spec)")
        doc = compare_across([(str(t.executor), analyse_games(t, baseline, settings)) for t in game_tables], settings)
        doc["game_lists"] = [{"sweep_id": t.sweep_id, **g} for t in game_tables for g in t.game_lists]
        return doc
    if csvs:
        if settings.games_hash is not None:
            raise CompareError("--games-hash: a summary CSV carries no game lists (fix: drop --games-hash)")
        return compare_summaries(load_summary_csv(csvs[0], baseline), baseline, settings)
    table = load_game_table(paths, games_hash=settings.games_hash, stream_design=settings.stream_design)
    doc = compare_games(table, baseline, settings)
    doc["game_lists"] = table.game_lists  # every list the arms carried, and the one compared on (issue 53)
    return doc
