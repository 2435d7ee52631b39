"""The report's Streams section: each cell's streams (per-stream success rate, spread) and the stream correlation
(the compare result's own ``streams`` block when it has one, else the one-way ICC of the stream counts)."""

from __future__ import annotations

import numpy as np
import pytest

from twinrun.core.compare import CompareSettings
from twinrun.core.compare.design import stream_icc_counts, stream_icc_games
from twinrun.core.compare.games import compare_games
from twinrun.core.compare.synthetic import synthetic_game_table
from twinrun.core.report import render_comparison, stream_correlation


def _result(replicates: tuple[str, ...]) -> tuple[dict, object]:
    table = synthetic_game_table({"a": (0.0, 0.5, 1.0)}, n_games=60, replicates=replicates, seed=3)
    return compare_games(table, "baseline", CompareSettings(n_boot=100)), table


def test_report_shows_each_cells_streams_and_the_stream_correlation() -> None:
    result, table = _result(("a", "baseline"))
    text = render_comparison(result, {})
    assert "## Streams" in text
    section = text.split("## Streams", 1)[1].split("\n## ", 1)[0]
    rate = {a.name: float(np.nanmean(table.outcomes[i])) for i, a in enumerate(table.arms)}
    row = next(line for line in section.splitlines() if line.startswith("| `a@20`"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1:3] == [f"{100 * rate['a@20']:.1f}", f"{100 * rate['a@20#r1']:.1f}"]
    assert cells[4] == f"{100 * np.std([rate['a@20'], rate['a@20#r1']], ddof=1):.1f}"
    assert any(line.startswith("| `baseline`") for line in section.splitlines())
    # the correlation shown is the one-way ICC of the cells' stream counts, with its interval and DEFF
    want = stream_icc_counts([[(60, round(60 * rate[f"{c}"])), (60, round(60 * rate[f"{c}#r1"]))]
                              for c in ("baseline", "a@10", "a@20", "a@30")], level=0.95)
    corr = stream_correlation(result)
    assert corr["icc"] == pytest.approx(want.icc) and corr["icc_ci"] == pytest.approx(list(want.ci))
    assert corr["deff"] == pytest.approx(1 + 59 * want.icc)
    assert f"Stream correlation (intra-stream ICC): {want.icc:.3f}" in section


def test_report_reads_the_compare_results_own_stream_block_and_skips_one_stream() -> None:
    result, _ = _result(("a", "baseline"))
    result["streams"] = {"icc": 0.0123, "icc_ci": [0.001, 0.05], "method": "compare's model", "deff": 1.7,
                         "deff_ci": [1.06, 3.95], "games": 60}
    text = render_comparison(result, {})
    assert "Stream correlation (intra-stream ICC): 0.012" in text and "compare's model" in text
    one, _ = _result(())
    assert "## Streams" not in render_comparison(one, {}) and stream_correlation(one) is None


def test_write_report_estimates_the_correlation_from_the_sweep_folders_games(tmp_path) -> None:
    """From a sweep folder the report's ICC removes the games' shared difficulty (streams x games ANOVA), and
    compare.json keeps it; the synthetic sweep's games differ strongly in difficulty (game_sd 1.5)."""
    import json

    from twinrun.core.compare import compare
    from twinrun.core.compare.synthetic import write_sweep
    from twinrun.core.report import write_report

    table = synthetic_game_table({"a": (0.0, 0.5, 1.0)}, n_games=60, replicates=("a", "baseline"), seed=3)
    folder = write_sweep(table, tmp_path / "sweep")
    result = compare([folder], "baseline", CompareSettings(n_boot=1000))
    write_report(result, tmp_path / "report", sweeps=[folder])
    saved = json.loads((tmp_path / "report" / "compare.json").read_text())
    idx = {a.name: i for i, a in enumerate(table.arms)}
    want = stream_icc_games([table.outcomes[[idx[c], idx[f"{c}#r1"]]] for c in ("baseline", "a@10", "a@20", "a@30")])
    assert saved["streams"]["icc"] == pytest.approx(want.icc) and saved["streams"]["games"] == 60
    text = (tmp_path / "report" / "report.md").read_text()
    assert f"Stream correlation (intra-stream ICC): {want.icc:.3f}" in text and "game effects removed" in text
