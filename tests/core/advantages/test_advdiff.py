"""`twinrun advdiff`: input validation (one-line errors with line numbers), the table, the CLI and its --json."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from twinrun.core.advantages import PRESETS
from twinrun.core.advantages.advdiff import AdvdiffInputError, compute_table, load_rows, parse_rows, resolve_presets

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "experiments" / "advdiff-example.jsonl"


def _write(tmp_path: Path, rows: list[dict | str]) -> Path:
    p = tmp_path / "rows.jsonl"
    p.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return p


def _row(g="g", t="a", s=0, r=1.0, **kw):
    return {"group": g, "trajectory": t, "step": s, "reward": r, **kw}


# ------------------------------------------------------------------------------------------------------------
# bad input: one line, naming the line number


@pytest.mark.parametrize(
    "bad,pattern",
    [
        ({"group": "g", "trajectory": "b", "step": 0}, r":2: missing field 'reward'"),
        ({"trajectory": "b", "step": 0, "reward": 1.0}, r":2: missing field 'group'"),
        ('{"group": "g", "trajectory": "b", "step": 0, "reward": NaN}', r":2: field 'reward': nan is not finite"),
        ('{"group": "g", "trajectory": "b", "step": 0, "reward": Infinity}', r":2: field 'reward': inf is not finite"),
        (_row(t="b", r="high"), r":2: field 'reward': 'high' is not a number"),
        (_row(t="b", s="1"), r":2: field 'step': '1' is not an integer"),
        (_row(t="b", s=1.5), r":2: field 'step': 1.5 is not an integer"),
        (_row(t="b", valid="yes"), r":2: field 'valid': 'yes' is not a boolean"),
        (_row(t="b", anchor=3), r":2: field 'anchor': 3 is not a string"),
        (_row(g="h", t="a", s=1), r":2: trajectory 'a' is in group 'h' but line 1 put it in group 'g'"),
        (_row(t="a", s=0, r=0.0), r":2: duplicate \(trajectory, step\) = \('a', 0\), first on line 1"),
        ("{not json", r":2: not JSON"),
        ("[1, 2]", r":2: a JSON list, not an object"),
    ],
)
def test_bad_rows_name_the_line(tmp_path, bad, pattern):
    path = _write(tmp_path, [_row(), bad])
    with pytest.raises(AdvdiffInputError, match=pattern) as e:
        load_rows(path)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(str(path)) and "(fix:" in msg


def test_empty_and_missing_files(tmp_path):
    with pytest.raises(AdvdiffInputError, match="no rows"):
        load_rows(_write(tmp_path, ["", "  "]))
    with pytest.raises(AdvdiffInputError, match="cannot be read"):
        load_rows(tmp_path / "nope.jsonl")
    with pytest.raises(AdvdiffInputError, match=r"'trpo' is not a preset \(fix: one of trl, "):
        resolve_presets("trl,trpo")


def test_blank_lines_extra_keys_and_null_reward_are_accepted():
    lines = [json.dumps(_row(provenance={"run": 1})), "", json.dumps(_row(t="b", r=None, anchor=None, valid=False))]
    data = parse_rows(lines)
    assert list(data.lines) == [1, 3] and math.isnan(data.rewards[1]) and list(data.valid) == [True, False]


def test_curation_rollout_records_expand_to_position_rows():
    """rollouts.jsonl rows of a twinrun run (the CurationRecord fields advdiff reads) become one row per position."""

    def rec(rollout, total, step_rewards, no_valid=(False, False, False)):
        return json.dumps({
            "kind": "curation_rollout", "group_id": "pick-7", "step": 3, "rollout_index": rollout,
            "reward": {"total": total}, "step_rewards": step_rewards, "anchors": ["h0", f"h1{rollout}", "h2"],
            "positions": [{"index": i, "anchor": ["h0", f"h1{rollout}", "h2"][i], "no_valid_call": no_valid[i]}
                          for i in range(3)],
        })

    data = parse_rows([rec(0, 1.0, [0.5, 0.25, 0.25]), rec(1, None, [], (False, True, False))])
    assert data.groups == ["pick-7@3"] * 6
    assert data.trajectories == ["pick-7@3/r0"] * 3 + ["pick-7@3/r1"] * 3
    assert list(data.steps) == [0, 1, 2, 0, 1, 2] and list(data.lines) == [1, 1, 1, 2, 2, 2]
    assert np.isnan(data.rewards[3:]).all() and list(data.valid) == [True] * 4 + [False, True]
    assert data.anchors[:3] == ["h0", "h10", "h2"]
    with pytest.raises(AdvdiffInputError, match=r":1: field 'step_rewards': 2 values for 3 positions"):
        parse_rows([rec(0, 1.0, [0.5, 0.5])])
    with pytest.raises(AdvdiffInputError, match=r":1: curation_rollout record lacks 'positions'"):
        parse_rows([json.dumps({"kind": "curation_rollout", "group_id": "g", "step": 0, "rollout_index": 0})])


# ------------------------------------------------------------------------------------------------------------
# the table


def test_two_single_step_trajectories_by_hand():
    # group g: rewards 1 and 0 -> mean .5, sample std sqrt(.5); trl eps 1e-4, verl 1e-6; paper: +-.5
    data = parse_rows([json.dumps(_row(t="a", r=1.0)), json.dumps(_row(t="b", r=0.0))])
    res = compute_table(data, ["trl", "verl", "twinrun_paper"])
    sd = math.sqrt(0.5)
    np.testing.assert_allclose(res.advantages["trl"], [0.5 / (sd + 1e-4), -0.5 / (sd + 1e-4)])
    np.testing.assert_allclose(res.advantages["verl"], [0.5 / (sd + 1e-6), -0.5 / (sd + 1e-6)])
    np.testing.assert_allclose(res.advantages["twinrun_paper"], [0.5, -0.5])
    out = res.to_json()
    (g,) = out["groups"]
    pair = {(x["a"], x["b"]): x for x in g["diffs"]}
    want = 0.5 / (sd + 1e-6) - 0.5 / (sd + 1e-4)
    assert pair[("trl", "verl")]["max_abs"] == pytest.approx(want)
    assert pair[("trl", "verl")]["mean_abs"] == pytest.approx(want)
    assert pair[("verl", "twinrun_paper")]["max_abs"] == pytest.approx(0.5 / (sd + 1e-6) - 0.5)


def test_multi_step_episode_reward_is_the_sum_of_steps():
    rows = [_row(t="a", s=0, r=0.25), _row(t="a", s=1, r=0.75), _row(t="b", s=0, r=0.0), _row(t="b", s=1, r=0.0)]
    res = compute_table(parse_rows([json.dumps(r) for r in rows]), ["twinrun_paper"])
    # R_a = 1, R_b = 0 -> +-.5 on every row of the trajectory
    np.testing.assert_allclose(res.advantages["twinrun_paper"], [0.5, 0.5, -0.5, -0.5])


# ------------------------------------------------------------------------------------------------------------
# CLI on the shipped example


@pytest.fixture(scope="module")
def cli_app():
    from twinrun.cli import app

    return app


def test_cli_json_schema_on_shipped_example(cli_app):
    result = CliRunner().invoke(cli_app, ["advdiff", str(EXAMPLE), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert set(out) == {"rows", "groups", "presets"}
    presets = ["trl", "verl", "verl_agent_gigpo", "twinrun_paper"]  # the default list
    assert list(out["presets"]) == presets
    n_lines = sum(1 for line in EXAMPLE.read_text().splitlines() if line.strip())
    assert len(out["rows"]) == n_lines
    for row in out["rows"]:
        assert list(row) == ["group", "trajectory", "step", *presets]
        assert all(isinstance(row[p], float) and math.isfinite(row[p]) for p in presets)
    assert [g["group"] for g in out["groups"]] == ["pick", "heat", "clean"]
    for g in out["groups"]:
        assert set(g) == {"group", "rows", "trajectories", "diffs"}
        assert len(g["diffs"]) == 6  # 4 presets -> 6 pairs
        for d in g["diffs"]:
            assert set(d) == {"a", "b", "max_abs", "mean_abs"} and 0 <= d["mean_abs"] <= d["max_abs"]
    for name, p in out["presets"].items():
        assert p["knobs"] == PRESETS[name].config.knobs() and p["source"] and p["description"]
    # the numbers are the library's numbers
    data = load_rows(EXAMPLE)
    direct = compute_table(data, presets)
    for p in presets:
        np.testing.assert_allclose([r[p] for r in out["rows"]], direct.advantages[p])


def test_cli_example_shows_the_singleton_divergence(cli_app):
    """In group 'clean' one of two rollouts is unmeasured: TRL (and twinrun) give the survivor 0, verl passes its
    raw episode reward through (mu=0, sigma=1)."""
    out = json.loads(CliRunner().invoke(cli_app, ["advdiff", str(EXAMPLE), "--json", "--presets", "trl,verl"]).stdout)
    clean = [r for r in out["rows"] if r["group"] == "clean"]
    data = load_rows(EXAMPLE)
    survivor = [i for i, t in enumerate(data.trajectories) if t == "clean/r0"]
    r_episode = float(np.sum(data.rewards[survivor]))
    for r in clean:
        assert r["trl"] == 0.0
        assert r["verl"] == pytest.approx(r_episode / (1 + 1e-6) if r["trajectory"] == "clean/r0" else 0.0)


def test_cli_tables_and_plot(cli_app, tmp_path):
    png = tmp_path / "adv.png"
    args = ["advdiff", str(EXAMPLE), "--presets", "trl,verl_agent_gigpo", "--plot", str(png)]
    result = CliRunner().invoke(cli_app, args)
    assert result.exit_code == 0, result.output
    assert "trl vs verl_agent_gigpo" in result.stdout and "eps=0.0001" in result.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_bad_input_is_one_line_and_exit_2(tmp_path):
    path = _write(tmp_path, [_row(), _row(s=0, r=2.0)])
    proc = subprocess.run(
        [sys.executable, "-c", "from twinrun.cli import main; main()", "advdiff", str(path)],
        capture_output=True, text=True,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert f"{path}:2: duplicate (trajectory, step)" in proc.stderr


def test_command_module_imports_no_matplotlib():
    code = "import sys, twinrun.commands.advdiff; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
