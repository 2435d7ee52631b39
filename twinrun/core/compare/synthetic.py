"""Synthetic sweeps (tests, benches, docs): a known truth to check the statistics against."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from twinrun.core.compare.model import ArmInfo, CompareError, GameTable


def synthetic_game_table(shapes: dict[str, Sequence[float]], *, n_games: int = 140, steps: Sequence[int] | None = None,
                         base_logit: float = 0.0, game_sd: float = 1.5, seed: int = 0,
                         unmeasured_share: float = 0.0, replicates: Sequence[str] = (),
                         baseline: str = "baseline") -> GameTable:
    """A sweep with known truth. Outcome of game g in an arm of run r at checkpoint k is
    Bernoulli(sigmoid(base_logit + d_g + shapes[r][k])), with game difficulty d_g ~ N(0, game_sd) shared by all
    arms (that is what makes pairing matter). The baseline arm has shape 0. `replicates` names runs whose every
    checkpoint is played again (replicate 1); "baseline" there adds a baseline replicate. A share of rows is made
    unmeasured at random.
    """
    rng = np.random.default_rng(seed)
    d = rng.normal(0.0, game_sd, n_games)
    k = len(next(iter(shapes.values()))) if shapes else 0
    steps = list(steps) if steps is not None else [10 * (i + 1) for i in range(k)]
    arms: list[ArmInfo] = []
    rows: list[np.ndarray] = []

    def play(shift: float) -> np.ndarray:
        p = 1.0 / (1.0 + np.exp(-(base_logit + d + shift)))
        y = (rng.random(n_games) < p).astype(np.float64)
        y[rng.random(n_games) < unmeasured_share] = np.nan
        return y

    def add(info: ArmInfo, shift: float) -> None:
        y = play(shift)
        info.n_unmeasured = int(np.isnan(y).sum())
        arms.append(info)
        rows.append(y)

    add(ArmInfo(baseline, None, None, 0, "baseline"), 0.0)
    if baseline in replicates:
        add(ArmInfo(f"{baseline}#r1", None, None, 1, "baseline"), 0.0)
    for run, shape in shapes.items():
        if len(shape) != len(steps):
            raise CompareError(f"shapes[{run!r}]: {len(shape)} values for {len(steps)} steps (fix: one per step)")
        for step, s in zip(steps, shape):
            add(ArmInfo(f"{run}@{step}", run, int(step), 0), float(s))
            if run in replicates:
                add(ArmInfo(f"{run}@{step}#r1", run, int(step), 1), float(s))
    ids = [f"game-{i:04d}" for i in range(n_games)]
    return GameTable(arms, np.vstack(rows), ids, sweep_id=f"synthetic-{seed}", games_hash=f"synthetic-{n_games}")
