"""The controls' committed rows are one compressed file, experiments/controls/data/rows.jsonl.gz (issue 54;
experiments/controls/rows.py): the same rows give the same bytes, `analyse.py view` rebuilds the sweep folder they
replaced file for file, `twinrun compare` reads that folder as it read the old one, and `compact --add` joins a later
sweep's runs or refuses before writing."""

from __future__ import annotations

import gzip
import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _analyse():
    spec = importlib.util.spec_from_file_location("controls_analyse_rows", ROOT / "experiments" / "controls" / "analyse.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _tree(path: Path) -> dict[str, bytes]:
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def _old_layout(packed: Path, dst: Path, runs: set[str] | None = None) -> Path:
    """The sweep folder as analyse.py compact wrote it before issue 54, from the same rows, written here without
    rows.py: sweep.json (indent 2, keys sorted), arms/<arm>.jsonl (one row a line, keys sorted) and
    metrics/<run>.jsonl (the run's own lines: keys in its order, no spaces)."""
    lines = [json.loads(ln) for ln in gzip.decompress(packed.read_bytes()).decode("utf-8").splitlines()]
    plan = lines[0]["plan"]
    arms = [a for a in plan["arms"] if runs is None or a["role"] == "baseline" or a.get("run") in runs]
    (dst / "arms").mkdir(parents=True)
    (dst / "metrics").mkdir()
    (dst / "sweep.json").write_text(json.dumps(dict(plan, arms=arms), indent=2, sort_keys=True) + "\n",
                                    encoding="utf-8")
    by_arm: dict[str, list[str]] = {a["arm"]: [] for a in arms}
    by_run: dict[str, list[str]] = {}
    for r in lines[1:]:
        if r["kind"] == "eval" and r["arm"] in by_arm:
            by_arm[r["arm"]].append(json.dumps(r, sort_keys=True) + "\n")
        elif r["kind"] == "metrics" and (runs is None or r["run"] in runs):
            by_run.setdefault(r["run"], []).append(json.dumps(r["row"], separators=(",", ":")) + "\n")
    for name, text in [*((f"arms/{a}", t) for a, t in by_arm.items()), *((f"metrics/{m}", t) for m, t in by_run.items())]:
        (dst / f"{name}.jsonl").write_text("".join(text), encoding="utf-8")
    return dst


def test_the_committed_file_is_what_the_writer_writes_from_its_folder(tmp_path):
    """Read, rebuilt as a folder, read back from the folder: the same text; gzip's header holds no time and no
    name, so the same rows give the same bytes."""
    an = _analyse()
    raw = an.ROWS.read_bytes()
    assert raw[:3] == b"\x1f\x8b\x08" and raw[3] & 0x08 == 0 and raw[4:8] == b"\0\0\0\0"  # no FNAME, mtime 0
    back = an.rows.read_folder(an.rows.unpack(tmp_path / "sweep"))
    assert an.rows.dumps(back) == gzip.decompress(raw).decode("utf-8")
    assert an.rows.compress(an.rows.dumps(back)) == an.rows.compress(gzip.decompress(raw).decode("utf-8"))
    plan = back.plan
    assert len({a["run"] for a in plan["arms"] if a.get("run")}) == len(back.metrics) >= 28
    assert all(len(back.arms[a["arm"]]) == len(plan["games"]) for a in plan["arms"])


def test_view_rebuilds_the_old_folder_file_for_file(tmp_path, capsys):
    an = _analyse()
    assert an.main(["view", "--to", str(tmp_path / "new")]) == 0
    assert _tree(tmp_path / "new") == _tree(_old_layout(an.ROWS, tmp_path / "old"))
    assert an.main(["view", "--to", str(tmp_path / "new")]) == 2  # not empty: refused
    assert "not empty" in capsys.readouterr().err


def _verdicts(res: dict) -> dict:
    """The numbers a compare.json's verdicts rest on."""
    fw = [{k: c.get(k) for k in ("a", "b", "verdict", "reason", "pearson", "pearson_ci", "interaction", "anova",
                                 "equivalence", "mean_curve_a", "mean_curve_b")} for c in res["frameworks"]["comparisons"]]
    pairs = [{k: p.get(k) for k in ("a", "b", "verdict", "reason", "pearson", "interaction")} for p in res["pairs"]]
    runs = {r: {k: v.get(k) for k in ("checkpoints", "lifts")} for r, v in res["runs"].items()}
    st = {k: res["streams"].get(k) for k in ("icc", "blocks", "design", "games_per_stream")}
    return {"frameworks": fw, "pairs": pairs, "runs": runs, "streams": st, "baseline": res["baseline"]}


def test_compare_reads_a_view_as_it_read_the_old_folder(tmp_path, capsys):
    """The pilot control through `twinrun compare` twice: from `analyse.py view pilot` and from the old layout built
    from the same rows; compare.json's verdict numbers are equal (and the folders too, byte for byte)."""
    from twinrun.testing.run_folders import run_twinrun

    an = _analyse()
    assert an.main(["view", "pilot", "--to", str(tmp_path / "new")]) == 0
    old = _old_layout(an.ROWS, tmp_path / "old", set(an.CONTROLS["pilot"]["runs"]))
    assert _tree(tmp_path / "new") == _tree(old)
    got = {}
    for name in ("old", "new"):
        code, _, err = run_twinrun(["compare", str(tmp_path / name), "--baseline", "baseline", "--n-boot", "500",
                                    "--out", str(tmp_path / f"{name}-report")], capsys)
        assert code == 0, err
        got[name] = _verdicts(json.loads((tmp_path / f"{name}-report" / "compare.json").read_text(encoding="utf-8")))
    assert got["new"] == got["old"]
    assert got["new"]["frameworks"][0]["verdict"] and got["new"]["frameworks"][0]["anova"]["p_value"] is not None


# ------------------------------------------------------------------------------------------------------------
# compact and compact --add on controls folders written by hand (the smallest size)


def _controls_folder(root: Path, sweep_id: str, runs: list[str], *, n_games: int = 2, **plan_edits) -> Path:
    """A controls folder as controls.py leaves it (runs/<run>/metrics.jsonl, sweep/sweep.json, sweep/arms/), each
    run one checkpoint x one stream; plan_edits change sweep.json's fields (a sweep played otherwise)."""
    from twinrun.core.sweeps.plan import stream_plan

    games = [{"game_id": f"g{i}", "path": f"/abs/g{i}", "task_type": "pick"} for i in range(n_games)]
    arms = [{"arm": "baseline", "role": "baseline", "run": None, "replicate": 0}]
    arms += [{"arm": f"{r}@1", "role": "checkpoint", "run": r, "replicate": 0, "run_dir": f"/abs/{r}",
              "checkpoint_path": "/abs/ckpt", "checkpoint_step": 1} for r in runs]
    plan = {"sweep_id": sweep_id, "games_hash": "gh", "seed": 0, "streams": 1, "executor": "scripted",
            "executor_settings_hash": "e", "split": "valid_seen", "games": games, "arms": arms,
            "stream_plans": [stream_plan(0, [g["game_id"] for g in games], 0).__dict__]} | plan_edits
    (root / "sweep" / "arms").mkdir(parents=True)
    (root / "sweep" / "sweep.json").write_text(json.dumps(plan, default=str), encoding="utf-8")
    for a in arms:
        rows = [{"kind": "eval", "arm": a["arm"], "sweep_id": sweep_id, "games_hash": "gh", "n_games": n_games,
                 "game_id": g["game_id"], "game_index": i, "outcome": "success", "run": a["run"], "wall_s": 0.25,
                 "curator_ops": ["big"], "provenance": {"backend": "trl", "host": "vm"}} for i, g in enumerate(games)]
        (root / "sweep" / "arms" / f"{a['arm']}.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    for r in runs:
        (root / "runs" / r).mkdir(parents=True)
        # verl writes its keys unsorted; a torn last line (a crash mid-write) is what every reader skips
        (root / "runs" / r / "metrics.jsonl").write_text('{"step":1,"kind":"step","backend":"verl"}\n{"step":2',
                                                         encoding="utf-8")
    return root


FIRST = [f"trl-s{i}" for i in range(3)] + [f"verl-s{i}" for i in range(3)]
UNPAIRED = [f"trlu-s{i}" for i in (10, 11, 12)] + [f"verlu-s{i}" for i in (20, 21, 22)]


def test_compact_writes_the_same_bytes_for_the_same_rows_and_leaves_a_file_that_holds_them(tmp_path):
    an = _analyse()
    src = _controls_folder(tmp_path / "src", "first", FIRST)
    one, two = tmp_path / "one.jsonl.gz", tmp_path / "two.jsonl.gz"
    assert an.compact(src, one) == an.compact(src, two) == sorted(FIRST)
    assert one.read_bytes() == two.read_bytes()
    stamp = one.stat().st_mtime_ns
    assert an.compact(src, one) == sorted(FIRST) and one.stat().st_mtime_ns == stamp  # not rewritten: no diff
    view = an.rows.unpack(tmp_path / "view", one)
    assert sorted(p.stem for p in (view / "metrics").glob("*.jsonl")) == sorted(FIRST)
    assert (view / "metrics" / "verl-s0.jsonl").read_text() == '{"step":1,"kind":"step","backend":"verl"}\n'
    plan = json.loads((view / "sweep.json").read_text())
    assert {g["path"] for g in plan["games"]} == {None} and {a.get("run_dir") for a in plan["arms"]} == {None}


@pytest.mark.parametrize("edit", [{"games_hash": "other"}, {"seed": 1}, {"streams": 2}, {"stream_plans": []},
                                  {"executor": "vllm"}, {"executor_settings_hash": "other"}, {"split": "valid_unseen"}])
def test_add_refuses_a_sweep_played_otherwise_and_writes_nothing(tmp_path, capsys, monkeypatch, edit):
    """games, seed, streams, stream plans, executor or split differ: `compact --add` exits 2 with one line naming the
    field and the fix, and the committed file keeps its bytes (and its time stamp)."""
    an = _analyse()
    committed = tmp_path / "rows.jsonl.gz"
    an.compact(_controls_folder(tmp_path / "first", "first", FIRST), committed)
    before, stamp = committed.read_bytes(), committed.stat().st_mtime_ns
    monkeypatch.setattr(an, "ROWS", committed)
    src = _controls_folder(tmp_path / "later", "later", UNPAIRED, **edit)
    assert an.main(["compact", "--add", "--from", str(src)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"differs from the committed sweep first in {next(iter(edit))}" in err
    assert "fix:" in err
    assert committed.read_bytes() == before and committed.stat().st_mtime_ns == stamp
    assert not list(tmp_path.glob(".rows.jsonl.gz.tmp*"))


def test_compact_add_joins_the_unpaired_negative_controls_runs(tmp_path, capsys, monkeypatch):
    """What `compact --add --from DIR` does with a later sweep of trlu-s10..12 and verlu-s20..22 played under the
    committed plan: the six runs join, negative-unpaired becomes complete, the committed runs' rows keep their
    bytes, and a second add changes nothing."""
    an = _analyse()
    committed = tmp_path / "rows.jsonl.gz"
    an.compact(_controls_folder(tmp_path / "first", "first", FIRST), committed)
    before = an.rows.read(committed)
    monkeypatch.setattr(an, "ROWS", committed)
    # a later sweep under the committed plan joins the committed file (the real one played other games: its own file)
    monkeypatch.delitem(an.CONTROLS["negative-unpaired"], "rows")
    src = _controls_folder(tmp_path / "later", "later", ["trl-s0", *UNPAIRED])  # trl-s0 replayed: not re-added
    assert an.main(["compact", "--add", "--from", str(src)]) == 0
    out = capsys.readouterr().out
    assert f"6 run(s) trained and swept: {', '.join(sorted(UNPAIRED))}" in out and "(unchanged)" not in out
    assert "  negative-unpaired: complete" in out and "  positive: not every run" in out
    after = an.rows.read(committed)
    assert after.plan["added"] == [{"sweep_id": "later", "runs": sorted(UNPAIRED), "curator_dtype": None,
                                    "twinrun_version": None, "spec_hash": None}]
    assert {a: after.arms[a] for a in before.arms} == before.arms and set(after.metrics) == set(FIRST) | set(UNPAIRED)
    assert {(r["sweep_id"], r["played_in"]) for r in after.arms["verlu-s22@1"]} == {("first", "later")}
    view = an.control_view("negative-unpaired", tmp_path / "view", committed)
    assert {a.get("run") for a in json.loads((view / "sweep.json").read_text())["arms"]} == {None, *UNPAIRED}
    packed = committed.read_bytes()
    assert an.main(["compact", "--add", "--from", str(src)]) == 0
    assert "(unchanged): 0 run(s)" in capsys.readouterr().out and committed.read_bytes() == packed
    # the sweep folder itself, not the controls folder holding it: one line, nothing written
    assert an.main(["compact", "--add", "--from", str(src / "sweep")]) == 2
    assert "holds no controls sweep" in capsys.readouterr().err and committed.read_bytes() == packed


def test_a_file_of_another_shape_is_one_line(tmp_path):
    an = _analyse()
    bad = tmp_path / "rows.jsonl.gz"
    for content, says in ((b"not gzip", "not gzipped UTF-8"), (gzip.compress(b'{"kind": "eval"}\n'), ":1: not a format-1"),
                          (gzip.compress(b'{"kind":"sweep","format":1,"plan":{"arms":[]}}\n{"kind":"eval","arm":"x"}\n'),
                           ":2: neither an eval row of a planned arm")):
        bad.write_bytes(content)
        with pytest.raises(an.rows.RowsError, match=says) as e:
            an.rows.read(bad)
        assert "fix:" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(an.rows.RowsError, match="missing"):
        an.rows.read(tmp_path / "none.jsonl.gz")
    nan = an.rows.Rows({"arms": [{"arm": "a", "role": "baseline"}]}, {"a": [{"kind": "eval", "arm": "a", "x": float("nan")}]})
    with pytest.raises(an.rows.RowsError, match="JSON cannot"):
        an.rows.write(nan, tmp_path / "nan.jsonl.gz")
    assert not list(tmp_path.glob("*nan*"))
