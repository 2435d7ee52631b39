"""sweep --until-decided (issue 41): the smoke arm's sweep played look by look on real ALFWorld games with the
scripted executor and the scripted curators of the stream tests (no model), each look recorded in sweep.json, a
stop, and a kill inside a look resumed without losing or repeating a row."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from twinrun.core.spec import load_spec
from twinrun.core.sweeps import sweep as sw
from twinrun.core.sweeps.until_decided import SweepError, check_resume, look_arms, plan_looks
from tests.core.sweeps.test_sweep_streams import checkpoint_folder, inserting_curator, read_rows

FAST = ["executor.max_turns=3"]


@pytest.fixture(scope="module")
def run3(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("runs3") / "trl-s0"
    for step in (2, 4, 6):  # a shape needs 3 checkpoints
        checkpoint_folder(root / "checkpoints" / f"step-{step:06d}", seed=step)
    return root


def test_plan_looks() -> None:
    assert plan_looks(8, 2) == (2, 4, 6, 8)
    assert plan_looks(5, 1) == (2, 3, 4, 5)
    assert plan_looks(7, 3) == (3, 6, 7)
    with pytest.raises(SweepError, match="fix:"):
        plan_looks(1, 1)


@pytest.mark.slow  # three looks of a sweep, a kill and a resume (the CLI test below keeps the wiring in the fast tier)
def test_until_decided_runs_records_stops_and_resumes_after_a_kill(tmp_path: Path, smoke_spec_path: Path,
                                                                    run3: Path, alfworld_data: Path) -> None:
    from twinrun.app.until_decided import sweep_until_decided
    from twinrun.core.compare import CompareSettings

    spec = load_spec(smoke_spec_path, FAST)
    out = tmp_path / "sw"
    kw = dict(data_root=alfworld_data, n_games=4, workers=0, policy_factory=inserting_curator, progress=False)
    runs = {"a": str(run3), "b": str(run3)}
    dirs = [f"{k}={v}" for k, v in runs.items()]
    calls: list[int] = []

    def counting_sweep(*a, **k):
        calls.append(len(k["arms"]))
        return sw.sweep(*a, **k)

    # a kill inside look 2: play look 1 and part of look 2 by hand (the same plan), cut one arm's file mid-way
    sw.sweep(spec, dirs, out, streams=4, arms=look_arms(sw.parse_run_dirs(dirs), 2), **kw)
    sw.sweep(spec, dirs, out, streams=4, arms=["baseline#r2", "a@2#r2"], **kw)
    cut = out / "arms" / "a@2#r2.jsonl"
    kept = b"".join(cut.read_bytes().splitlines(keepends=True)[:2])
    cut.write_bytes(kept + b'{"torn')
    settings = CompareSettings(n_boot=1000, seed=0)
    seq = sweep_until_decided(counting_sweep, spec, dirs, out, max_streams=4, per_look=2, settings=settings, futility_p=1.0, **kw)
    # a and b are one run (nothing to find) and 4 games a stream decide nothing at look 1's level (0.0051, HSD gamma
    # -2); futility is off: look 2 is played
    assert seq["looks_at"] == [2, 4] and seq["stopped_at"] == 4 and seq["stop"] in ("decided", "last look")
    manifest = json.loads((out / "sweep.json").read_text())
    assert manifest["sequential"] == seq and manifest["streams"] == 4
    assert [lk["streams"] for lk in seq["looks"]] == [2, 4][: len(seq["looks"])]
    assert all(lk["pairs"] and "alpha" in lk for lk in seq["looks"])
    rows = read_rows(cut)  # the arm killed inside look 2: its kept rows, then the rest, each game once
    assert cut.read_bytes().startswith(kept) and sorted(r["game_index"] for r in rows) == [0, 1, 2, 3]
    # no stream beyond the stop was played
    played = {p.stem for p in (out / "arms").glob("*.jsonl")}
    assert all(int(n.split("#r")[1]) < seq["stopped_at"] for n in played if "#r" in n)
    # a stopped sweep plays nothing more; other looks are refused before any write
    calls.clear()
    again = sweep_until_decided(counting_sweep, spec, dirs, out, max_streams=4, per_look=2, settings=settings, futility_p=1.0, **kw)
    assert again == seq and calls == []
    before = (out / "sweep.json").read_bytes()
    with pytest.raises(SweepError, match=r"planned with looks at 2,4 streams, not 2,3,4 \(fix:"):
        check_resume(out, plan_looks(4, 1))
    assert (out / "sweep.json").read_bytes() == before
    # an unfinished sweep whose looks were taken under another rule (e.g. OBF before the HSD default) is refused
    from twinrun.app.until_decided import sequential_rule

    manifest["sequential"] = dict(seq, stop=None, stopped_at=None, rule="group-sequential looks ... OBF")
    (out / "sweep.json").write_text(json.dumps(manifest))
    assert check_resume(out, (2, 4), "group-sequential looks ... OBF")["rule"].endswith("OBF")
    with pytest.raises(SweepError, match=r"took its looks under the rule .*OBF.* \(fix:"):
        check_resume(out, (2, 4), sequential_rule(4, 2, futility_p=1.0).describe())
    calls.clear()
    before = (out / "sweep.json").read_bytes()
    with pytest.raises(SweepError, match=r"took its looks under the rule"):  # the sweep itself checks it first
        sweep_until_decided(counting_sweep, spec, dirs, out, max_streams=4, per_look=2, settings=settings,
                            futility_p=1.0, **kw)
    assert calls == [] and (out / "sweep.json").read_bytes() == before


@pytest.mark.alfworld
def test_cli_sweep_until_decided_on_the_smoke_arm(tmp_path: Path, smoke_spec_path: Path, run3: Path) -> None:
    """`twinrun sweep --until-decided` end to end: the smoke arm (scripted executor, real ALFWorld games), a cap
    of 3 streams in looks of 1: it stops (decided or futility) or reaches its cap, records each look in sweep.json,
    plays no stream after the stop, and compare --out shows the looks in report.md."""
    from typer.testing import CliRunner

    from twinrun.cli import app

    out = tmp_path / "sw"
    runner = CliRunner()
    res = runner.invoke(app, ["sweep", f"a={run3}", f"b={run3}", "--spec", str(smoke_spec_path), "--out", str(out),
                              "--until-decided", "--max-streams", "3", "--streams-per-look", "1", "--games", "2",
                              "--workers", "0", "--curator", "no-ops", "--no-progress", "--set",
                              "executor.max_turns=3", "--set", "tracking.backend=none", "--json"])
    assert res.exit_code == 0, res.output
    seq = json.loads(res.stdout)["sequential"]
    assert seq["looks_at"] == [2, 3] and seq["stop"] in ("decided", "futility", "last look")
    assert seq["stopped_at"] in (2, 3) and (seq["stop"] != "last look" or seq["stopped_at"] == 3)
    manifest = json.loads((out / "sweep.json").read_text())
    assert manifest["sequential"] == seq and manifest["streams"] == 3
    assert [lk["streams"] for lk in seq["looks"]] == [2, 3][: len(seq["looks"])]
    played = {p.stem for p in (out / "arms").glob("*.jsonl")}
    streams = {int(n.split("#r")[1]) if "#r" in n else 0 for n in played}
    assert streams == set(range(seq["stopped_at"]))  # every stream up to the stop, none after
    assert {"baseline", "a@2", "b@6", "a@4#r1"} <= played
    rep = tmp_path / "rep"
    res = runner.invoke(app, ["compare", str(out), "--baseline", "baseline", "--out", str(rep), "--n-boot", "200",
                              "--no-track"])
    assert res.exit_code == 0, res.output
    text = (rep / "report.md").read_text()
    assert "## Looks (group-sequential)" in text and "| 1 | 2 | a vs b |" in text


@pytest.mark.alfworld
@pytest.mark.slow
def test_until_decided_on_ray_runs_each_looks_arms_as_parallel_tasks(tmp_path: Path, smoke_spec_path: Path,
                                                                    run3: Path, alfworld_data: Path) -> None:
    """Real Ray in local mode (3 CPUs): each look is one fan-out of its arms as Ray tasks, in worker processes
    (not the driver), more than one at a time; the looks are recorded as on a local sweep."""
    pytest.importorskip("ray")
    import os

    from twinrun.app.until_decided import sweep_until_decided
    from twinrun.core.compare import CompareSettings
    from twinrun.core.sweeps.ray_tasks import RAY_DIR, attempts

    spec = load_spec(smoke_spec_path, FAST)
    out = tmp_path / "sw"
    dirs = [f"a={run3}", f"b={run3}"]
    seq = sweep_until_decided(sw.sweep, spec, dirs, out, max_streams=3, per_look=1, futility_p=1.0,
                              settings=CompareSettings(n_boot=200, seed=0), data_root=alfworld_data, n_games=2,
                              workers=0, policy_factory=sw.no_ops_policy_factory, progress=False,
                              ray_address="local", ray_num_cpus=3)
    assert seq["looks_at"] == [2, 3] and seq["stop"] in ("decided", "last look")
    assert json.loads((out / "sweep.json").read_text())["sequential"] == seq
    played = sorted(p.stem for p in (out / "arms").glob("*.jsonl"))
    assert (out / RAY_DIR).is_dir()
    runs = {arm: attempts(out, arm) for arm in played}
    assert all(runs[arm] for arm in played), [a for a in played if not runs[a]]  # every arm ran as a Ray task
    pids = {e["pid"] for tries in runs.values() for e in tries}
    assert os.getpid() not in pids
    # look 1's arms (streams 0 and 1 of 7 cells) went out together: several worker processes took them
    first = {e["pid"] for arm, tries in runs.items() if "#r2" not in arm for e in tries}
    assert len(first) >= 2, first
