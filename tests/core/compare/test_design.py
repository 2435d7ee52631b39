"""twinrun design (twinrun.core.compare.design): hand cases, and the predicted power against simulated rejection
rates of the planned stream-level test on planted streams with known intra-stream correlation.

Planted streams: a stream's success rate is drawn from a beta distribution of mean p whose beta-binomial
correlation between two games of the stream is exactly rho (a + b = (1 - rho) / rho); its m games are then
Bernoulli draws at that rate. Planted game difficulty (for the estimator): every stream of a cell plays the same
games, game g at p_g plus the stream's shift.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from twinrun.core.compare import design as d
from twinrun.core.compare.model import CompareError


def stream_rates(rng: np.random.Generator, p: float, rho: float, m: int, shape: tuple[int, ...]) -> np.ndarray:
    """Success rates of beta-binomial streams of m games (shape: any leading axes)."""
    if rho == 0:
        pi = np.full(shape, p)
    else:
        s = (1 - rho) / rho
        pi = rng.beta(p * s, (1 - p) * s, size=shape)
    return rng.binomial(m, pi) / m


def simulate(kind: str, delta: float, rho: float, streams: int, games: int, checkpoints: int, alpha: float,
             sims: int, seed: int) -> float:
    """Rejection rate of the planned test (pooled between-stream variance of the layout's cells, t with its df;
    with one stream the z-test with the variance rho states)."""
    rng = np.random.default_rng(seed)
    k = checkpoints
    if kind == "lift":  # cells: the run's K checkpoints (checkpoint 0 carries the lift) and the baseline
        means = np.full(k + 1, 0.5 - delta / 2)
        means[0] = 0.5 + delta / 2
    else:  # two runs' K checkpoints; run A's checkpoint 0 raised so its centred difference from run B is delta
        means = np.full(2 * k, 0.5)
        means[0] += delta * k / (k - 1)
        means -= means.mean() - 0.5
    y = np.stack([stream_rates(rng, mu, rho, games, (sims, streams)) for mu in means], axis=1)  # [sims, cells, R]
    cell = y.mean(axis=2)
    if kind == "lift":
        est = cell[:, 0] - cell[:, k]
        scale = 2.0 / streams
    else:
        a, b = cell[:, :k], cell[:, k:]
        est = (a[:, 0] - a.mean(axis=1)) - (b[:, 0] - b.mean(axis=1))
        scale = 2.0 * (1 - 1 / k) / streams
    if streams == 1:
        se = math.sqrt(scale * d.stream_variance(games, rho, 0.5))
        return float((np.abs(est / se) > stats.norm.ppf(1 - alpha / 2)).mean())
    df = y.shape[1] * (streams - 1)
    s2 = ((y - cell[:, :, None]) ** 2).sum(axis=(1, 2)) / df
    t = est / np.sqrt(scale * s2)
    return float((np.abs(t) > stats.t.ppf(1 - alpha / 2, df)).mean())


# ------------------------------------------------------------------------------------------------------------
# Hand cases


def test_power_and_games_by_hand() -> None:
    assert d.design_effect(140, 0.02) == pytest.approx(3.78)  # docs/streams.md: SE about twice the naive one
    # one stream, no correlation: the two-sample normal test; Var = 2 x 0.25 / 100, ncp = 0.1 / 0.0707 = 1.414
    assert d.power(0.10, 0.0, 1, 100) == pytest.approx(stats.norm.cdf(1.4142 - 1.96) + stats.norm.cdf(-1.4142 - 1.96),
                                                       abs=1e-4)
    # the textbook n per group: 2 p (1 - p) (z_.975 + z_.8)^2 / delta^2 = 392.4 -> 393
    assert d.power(0.10, 0.0, 1, 393) >= 0.8 > d.power(0.10, 0.0, 1, 392)
    # no difference: power is the level, for t and normal alike
    assert d.power(0.0, 0.02, 4, 32) == pytest.approx(0.05) and d.power(0.0, 0.02, 1, 32) == pytest.approx(0.05)
    # streams at the protocol's games: with rho 0.02, 10 points and 140 games per stream, 8 streams fall short and
    # the fewest that decide are found by whole streams
    des = d.design_table(0.10, 0.02, 140, checkpoints=8, runs=2, streams=(8, 16))
    rows = {r.streams: r for r in des.rows}
    need = des.streams
    assert need is not None and 8 < need <= 16 and set(rows) == {8, need, 16}
    assert d.power(0.10, 0.02, need, 140, checkpoints=8) >= 0.8 > d.power(0.10, 0.02, need - 1, 140, checkpoints=8)
    assert not rows[8].decides and rows[need].decides and rows[16].episodes == (8 * 2 + 1) * 16 * 140
    assert all(r.games == 140 and r.deff == pytest.approx(1 + 139 * 0.02) for r in des.rows)
    # a shape difference needs K >= 2; bad input is one line naming the field
    with pytest.raises(CompareError, match=r"--checkpoints: 1 \(fix"):
        d.power(0.1, 0.02, 2, 32, kind="shape", checkpoints=1)
    with pytest.raises(CompareError, match=r"--rho: 1.5 \(fix"):
        d.design_table(0.1, 1.5, 140)


def test_icc_estimators_by_hand() -> None:
    # one cell, two streams of 4 games: all-or-nothing streams -> 1; identical streams -> -1 / (m - 1)
    assert d.stream_icc_counts([[(4, 4), (4, 0)]]).icc == pytest.approx(1.0)
    assert d.stream_icc_counts([[(4, 2), (4, 2)]]).icc == pytest.approx(-1 / 3)
    # streams x games [[1, 1, 0], [0, 0, 0]]: SSB = 2/3 (1 df), residual SS = 1/3 (2 df) -> (2/3 - 1/6) / (2/3 + 2/6)
    est = d.stream_icc_games([np.array([[1, 1, 0], [0, 0, 0]], float)])
    assert est.icc == pytest.approx(0.5) and (est.df_between, est.df_within, est.m0) == (1, 2, 3)
    lo, hi = est.ci
    assert lo <= 0.5 <= hi
    # a cell with one stream carries nothing; with no cell of 2 streams there is no estimate
    assert d.stream_icc_counts([[(10, 3)]]).icc is None



# ------------------------------------------------------------------------------------------------------------
# Predicted vs simulated power (planted streams with known rho)


@pytest.mark.parametrize("kind, delta, rho, streams, games, checkpoints", [
    ("lift", 0.12, 0.02, 4, 32, 3),
    ("lift", 0.20, 0.05, 2, 64, 8),
    ("lift", 0.0, 0.05, 3, 48, 4),  # no difference: the level
    ("shape", 0.15, 0.03, 3, 40, 4),
    ("lift", 0.15, 0.02, 1, 100, 4),  # one stream: rho stated, normal test
])
def test_predicted_power_matches_simulated_power(kind: str, delta: float, rho: float, streams: int, games: int,
                                                 checkpoints: int) -> None:
    predicted = d.power(delta, rho, streams, games, kind=kind, checkpoints=checkpoints)
    simulated = simulate(kind, delta, rho, streams, games, checkpoints, 0.05, sims=4000, seed=7)
    assert abs(predicted - simulated) < 0.03, (predicted, simulated)


def test_the_streams_named_reach_the_target_power_by_simulation() -> None:
    """The design's answer at the protocol's games per stream, played: at the streams it names the simulated power
    reaches the target (within simulation error), and the power one stream fewer, predicted just short of it (0.796),
    is the simulated one; two thirds of the streams fall clearly short."""
    rho, delta, k, m = 0.04, 0.13, 8, 140
    need = d.design_table(delta, rho, m, checkpoints=k).streams
    assert need == 12
    sim = simulate("lift", delta, rho, need, m, k, 0.05, sims=20000, seed=11)
    assert sim > 0.8 - 0.015 and abs(sim - d.power(delta, rho, need, m, checkpoints=k)) < 0.015
    fewer = simulate("lift", delta, rho, need - 1, m, k, 0.05, sims=20000, seed=12)
    assert d.power(delta, rho, need - 1, m, checkpoints=k) < 0.8
    assert abs(fewer - d.power(delta, rho, need - 1, m, checkpoints=k)) < 0.015
    assert simulate("lift", delta, rho, 8, m, k, 0.05, sims=20000, seed=13) < 0.7


def test_a_design_never_names_more_games_per_stream_than_the_split_holds() -> None:
    """A stream is the split played in order through one repository: the games per stream are the protocol's in
    every row, more than the split holds are refused (one line naming the split's size), and where no number of
    streams up to the cap decides the design says so instead of reaching for games."""
    for delta, rho, m in [(0.13, 0.04, 140), (0.05, 0.10, 134), (0.30, 0.0, 32), (0.02, 0.2, 140)]:
        des = d.design_table(delta, rho, m, checkpoints=8, runs=2, max_streams=64, split_games=140)
        assert {r.games for r in des.rows} == {m} and max(r.streams for r in des.rows) <= 64
    with pytest.raises(CompareError, match=r"--games-per-stream: 141 games per stream, but ALFWorld valid_seen "
                                           r"holds 140 held-out games .*fix: 140 or fewer"):
        d.design_table(0.1, 0.02, 141, split_games=140, split="ALFWorld valid_seen")
    hopeless = d.design_table(0.02, 0.2, 140, checkpoints=8, max_streams=64, split_games=140)
    assert hopeless.streams is None and hopeless.power_at_cap < 0.8 and not any(r.decides for r in hopeless.rows)


# ------------------------------------------------------------------------------------------------------------
# The ICC estimators on planted streams


def test_count_icc_is_unbiased_and_covers_without_game_effects() -> None:
    rng = np.random.default_rng(3)
    rho, cells, streams, games = 0.05, 8, 4, 48
    est, cover = [], 0
    draws = 300
    for _ in range(draws):
        rates = stream_rates(rng, 0.4, rho, games, (cells, streams))
        res = d.stream_icc_counts([[(games, int(round(x * games))) for x in row] for row in rates])
        est.append(res.icc)
        cover += res.ci[0] <= rho <= res.ci[1]
    assert abs(np.mean(est) - rho) < 0.01
    assert 0.90 <= cover / draws <= 0.99


def test_game_icc_removes_shared_game_difficulty_that_biases_the_count_icc() -> None:
    """Every stream plays the same games (half at 0.3, half at 0.7) shifted by its own uniform(-0.15, 0.15):
    rho = var(shift) / mean p_g (1 - p_g) = 0.0075 / 0.21. The games estimator finds it; counts alone read the
    shared difficulty as within-stream noise and come out low."""
    rng = np.random.default_rng(5)
    cells, streams, games = 8, 4, 64
    pg = np.where(np.arange(games) % 2 == 0, 0.3, 0.7)
    truth = (0.15 ** 2 / 3) / float((pg * (1 - pg)).mean())
    by_games, by_counts, cover = [], [], 0
    draws = 200
    for _ in range(draws):
        shift = rng.uniform(-0.15, 0.15, size=(cells, streams, 1))
        y = (rng.random((cells, streams, games)) < pg + shift).astype(float)
        g = d.stream_icc_games(list(y))
        by_games.append(g.icc)
        cover += g.ci[0] <= truth <= g.ci[1]
        by_counts.append(d.stream_icc_counts([[(games, int(s)) for s in c.sum(axis=1)] for c in y]).icc)
    assert abs(np.mean(by_games) - truth) < 0.01
    assert np.mean(by_counts) < truth - 0.005  # about -0.009 here
    assert 0.88 <= cover / draws <= 0.99


# ------------------------------------------------------------------------------------------------------------
# The command


def test_design_command_with_a_stated_rho_prints_the_table_and_json() -> None:
    from typer.testing import CliRunner

    from twinrun.cli import app

    runner = CliRunner()
    res = runner.invoke(app, ["design", "--delta", "10", "--rho", "0.02", "--checkpoints", "8", "--runs", "2",
                              "--streams", "8,16", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    # no spec, no pilot: the whole of ALFWorld's valid_seen per stream
    assert out["games_per_stream"] == 140 and out["split"]["games"] == 140 and out["games_source"] == "the whole split"
    need = out["streams_needed"]
    assert [r["streams"] for r in out["rows"]] == sorted({8, need, 16}) and out["max_streams"] == 64
    assert all(r["games"] == 140 for r in out["rows"])
    assert out["rho"] == 0.02 and out["rho_source"] == "stated"
    text = runner.invoke(app, ["design", "--delta", "10", "--rho", "0.02", "--checkpoints", "8", "--runs", "2"])
    assert text.exit_code == 0 and "DEFF" in text.output and f"fewest that decide: {need} streams x 140" in text.output
    none = runner.invoke(app, ["design", "--delta", "2", "--rho", "0.2", "--max-streams", "16"])
    assert none.exit_code == 0 and "no number of streams up to 16 decides at 140 games per stream" in none.output
    bad = runner.invoke(app, ["design", "--delta", "10"])
    assert bad.exit_code != 0 and "--rho/--pilot: give exactly one" in str(bad.exception)


def test_design_command_keeps_the_games_per_stream_within_the_split(tmp_path) -> None:
    """--games-per-stream beyond the split is refused in one line naming the split's size; --spec reads the games
    per stream from environment.eval_games and the split from environment.eval_split (ALFWorld valid_unseen: 134);
    eval_games null is the whole split."""
    import yaml
    from typer.testing import CliRunner

    from twinrun.cli import app
    from twinrun.core.envs.splits import held_out_games

    assert (held_out_games("alfworld", "valid_seen"), held_out_games("alfworld", "valid_unseen")) == (140, 134)
    runner = CliRunner()
    base = ["design", "--delta", "13", "--rho", "0.04", "--json"]
    bad = runner.invoke(app, base + ["--games-per-stream", "500"])
    assert bad.exit_code != 0 and "--games-per-stream: 500 games per stream, but ALFWorld valid_seen holds 140" in \
        str(bad.exception)
    smoke = Path(__file__).resolve().parents[3] / "experiments" / "smoke-cpu.yaml"
    spec = yaml.safe_load(smoke.read_text(encoding="utf-8"))
    got = json.loads(runner.invoke(app, base + ["--spec", str(smoke)]).stdout)
    assert got["games_per_stream"] == spec["environment"]["eval_games"] == 32
    assert "environment.eval_games" in got["games_source"] and all(r["games"] == 32 for r in got["rows"])
    for eval_games, expect in ((None, 134), (200, None)):
        spec["environment"].update(eval_split="valid_unseen", eval_games=eval_games)
        spec["prompts"] = {k: str(smoke.parent / v) for k, v in spec["prompts"].items()}  # the copy lives elsewhere
        path = tmp_path / "spec.yaml"
        path.write_text(yaml.safe_dump(spec), encoding="utf-8")
        res = runner.invoke(app, base + ["--spec", str(path)])
        if expect is None:  # 200 on a split of 134
            assert res.exit_code != 0 and "environment.eval_games in" in str(res.exception)
            assert "ALFWorld valid_unseen holds 134" in str(res.exception)
        else:
            assert json.loads(res.stdout)["games_per_stream"] == expect


# ------------------------------------------------------------------------------------------------------------
# Crossed streams: the stream blocks cancel in a shape contrast (issue 42)


def simulate_blocked_shape(delta: float, rho: float, block_sd: float, streams: int, games: int, checkpoints: int,
                           alpha: float, sims: int, seed: int) -> float:
    """Rejection rate of the blocked shape test: beta-binomial streams (rho: their cell-specific correlation) plus
    a block per run's stream shared by all its checkpoints (sd block_sd on the rate); the centred difference at
    checkpoint 0 against the randomized-block residual of both runs, df 2 (K - 1)(R - 1)."""
    rng = np.random.default_rng(seed)
    k = checkpoints
    means = np.full(2 * k, 0.5)
    means[0] += delta * k / (k - 1)
    means -= means.mean() - 0.5
    y = np.stack([stream_rates(rng, mu, rho, games, (sims, streams)) for mu in means], axis=1)  # [sims, 2K, R]
    y = y.reshape(sims, 2, k, streams) + rng.normal(0, block_sd, (sims, 2, 1, streams))
    cell = y.mean(axis=3)
    res = y - cell[..., None] - y.mean(axis=2, keepdims=True) + y.mean(axis=(2, 3), keepdims=True)
    df = 2 * (k - 1) * (streams - 1)
    s2 = (res**2).sum(axis=(1, 2, 3)) / df
    est = (cell[:, 0, 0] - cell[:, 0].mean(axis=1)) - (cell[:, 1, 0] - cell[:, 1].mean(axis=1))
    t = est / np.sqrt(2.0 * (1 - 1 / k) / streams * s2)
    return float((np.abs(t) > stats.t.ppf(1 - alpha / 2, df)).mean())


@pytest.mark.parametrize("delta, rho, streams, games, checkpoints", [
    (0.08, 0.005, 4, 140, 8),
    (0.0, 0.01, 3, 64, 4),  # no difference: the level
])
def test_blocked_shape_power_matches_simulation_whatever_the_blocks(delta: float, rho: float, streams: int,
                                                                    games: int, checkpoints: int) -> None:
    """The design's blocked shape power (rho the ICC left after the blocks, df 2 (K - 1)(R - 1)) against simulated
    rejections with large stream blocks (sd 10 points on the rate): the blocks do not enter, as they cancel."""
    predicted = d.power(delta, rho, streams, games, kind="shape", checkpoints=checkpoints, blocked=True)
    for block_sd in (0.0, 0.10):
        simulated = simulate_blocked_shape(delta, rho, block_sd, streams, games, checkpoints, 0.05, 4000, 9)
        assert abs(predicted - simulated) < 0.03, (block_sd, predicted, simulated)
    assert d.contrast("shape", streams, games, rho, 0.5, checkpoints, blocked=True)[1] == 2 * (checkpoints - 1) * (streams - 1)


def test_a_crossed_pilot_sizes_shape_decisions_from_its_blocked_icc(tmp_path) -> None:
    """A crossed pilot (blocks of sd 0.7 logit per run's stream): the ICC left after the blocks is far below the
    whole ICC, and `design --kind shape --pilot` plans with it (the lift keeps the whole ICC); the same pilot
    without its manifest (nested) plans shape with the whole ICC."""
    from typer.testing import CliRunner

    from twinrun.cli import app
    from twinrun.core.compare.synthetic import planted_table, write_sweep

    folder = write_sweep(planted_table("flat", seed=1, streams=4, crossed=True, block_sd=0.7, stream_sd=0.1),
                         tmp_path / "pilot")
    p = d.pilot_from_sweep(folder)
    assert p.blocked is not None and p.blocked["icc"] < 0.3 * p.icc.icc and p.blocked["block_share"] > 0.5
    runner = CliRunner()
    args = ["design", "--delta", "8", "--pilot", str(folder), "--streams", "4", "--json"]
    shape = json.loads(runner.invoke(app, args + ["--kind", "shape"]).stdout)
    lift = json.loads(runner.invoke(app, args).stdout)
    assert shape["streams_design"] == "crossed" and shape["rho"] == pytest.approx(max(p.blocked["icc"], 0.0))
    assert "after each run's stream blocks" in shape["rho_assumes"]
    assert lift["rho"] == pytest.approx(p.icc.icc) and "whole" in lift["rho_assumes"]
    (folder / "sweep.json").unlink()
    nested = json.loads(runner.invoke(app, args + ["--kind", "shape"]).stdout)
    assert nested["streams_design"] == "nested" and nested["rho"] == pytest.approx(p.icc.icc)
