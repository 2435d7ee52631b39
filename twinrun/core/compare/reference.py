"""What twinrun's real-training controls measured, quoted where a sweep cannot measure it itself.

With one stream per arm (a paper's table, an old sweep) the intra-stream correlation rho is not estimable, so the
report cannot say how wide a checkpoint's lift really is. It quotes instead the rho twinrun measured on real
trainings (the negative control: TRL and verl runs of experiments/learn-cpu.yaml, three seeds each, crossed
streams; docs/findings.md) and says what that rho would mean for this sweep: the smallest lift one stream of its
length detects. The numbers below are that control's as `compare` computes them from the committed rows
(experiments/controls/data/rows.jsonl.gz); tests/test_controls_findings.py holds them equal, so a change to compare
or to the rows that moves them turns red.

Caveat said with the numbers: rho was measured at 32-game streams of a tiny curator and a scripted executor, and a
stream of another length, curator or executor may correlate differently; it is an order of magnitude, not a
substitute for playing >= 2 streams.
"""

from __future__ import annotations

from twinrun.core.compare.design import detectable

CONTROLS_ICC = 0.031
CONTROLS_ICC_CI = (0.019, 0.048)
CONTROLS_GAMES_PER_STREAM = 32  # the stream length rho was measured at (the controls' 32 held-out games)
CONTROL = "negative"  # six runs of one algorithm (TRL and verl, three seeds each): the most rows of one truth


def one_stream_sentence(games: float, rate: float = 0.5) -> str:
    """What the controls' rho implies for one stream of `games` games: the smallest lift over the baseline a
    checkpoint's single stream detects (80% power, two-sided 0.05, at success rate 0.5 where a game's variance is
    largest; design.detectable), beside the one the games would give if they were independent."""
    m = max(1, round(games))
    at = 100 * detectable(CONTROLS_ICC, 1, m, rate=rate)
    lo, hi = (100 * detectable(r, 1, m, rate=rate) for r in CONTROLS_ICC_CI)
    naive = 100 * detectable(0.0, 1, m, rate=rate)
    return (f"twinrun's own controls measured rho {CONTROLS_ICC:.3f} [{CONTROLS_ICC_CI[0]:.3f}, "
            f"{CONTROLS_ICC_CI[1]:.3f}] on real trainings (docs/findings.md, {CONTROLS_GAMES_PER_STREAM}-game "
            f"streams); at that rho one stream of {m} games detects a lift of {at:.0f} pp [{lo:.0f}, {hi:.0f}] at "
            f"80% power (success rate 0.5), against {naive:.0f} pp if its games were independent")
