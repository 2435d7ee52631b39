"""The report's Streams section: compare's stream sentence (ICC, DEFF) and each cell's streams (per-stream success
rate, mean, SD and range across streams) from ``stream_arms``."""

from __future__ import annotations

import numpy as np

from twinrun.core.compare import CompareSettings
from twinrun.core.compare.games import compare_games
from twinrun.core.compare.synthetic import synthetic_game_table
from twinrun.core.compare.report import render_comparison


def test_report_shows_each_cells_streams_and_their_spread() -> None:
    table = synthetic_game_table({"a": (0.0, 0.5, 1.0)}, n_games=60, streams=2, stream_sd=0.3, seed=3)
    result = compare_games(table, "baseline", CompareSettings(n_boot=1000))
    text = render_comparison(result, {})
    section = text.split("## Streams", 1)[1].split("\n## ", 1)[0]
    rate = {a.name: float(np.nanmean(table.outcomes[i])) for i, a in enumerate(table.arms)}
    row = next(line for line in section.splitlines() if line.startswith("| `a@20`"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1:3] == [f"{100 * rate['a@20']:.1f}", f"{100 * rate['a@20#r1']:.1f}"]
    assert cells[4] == f"{100 * np.std([rate['a@20'], rate['a@20#r1']], ddof=1):.1f}"
    assert cells[5] == f"{100 * abs(rate['a@20'] - rate['a@20#r1']):.1f}"
    assert "Intra-stream correlation" in section  # compare's ICC and design effect, above the table
    one = compare_games(synthetic_game_table({"a": (0.0, 0.5, 1.0)}, n_games=60, seed=3), "baseline",
                        CompareSettings(n_boot=1000))
    assert "| stream 0 %" not in render_comparison(one, {})
