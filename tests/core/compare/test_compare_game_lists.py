"""Loud where compare was silent (issue 53): arms whose rows carry another game list than their sweep's are refused
unless `--games-hash` says which list to compare on (and the report states every list seen); `--stream-design
crossed` takes streams as blocks from the rows' positions, and is refused where the rows contradict it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from twinrun.core.compare import CompareError, CompareSettings, compare
from twinrun.core.compare.synthetic import synthetic_game_table, write_sweep

FAST = CompareSettings(n_boot=200)


def sweep_folder(tmp_path: Path, *, streams: int = 1, crossed: bool = False) -> Path:
    t = synthetic_game_table({"trl": [0.0, 0.1, 0.2], "verl": [0.0, 0.1, 0.2]}, n_games=20, streams=streams,
                             crossed=crossed, block_sd=0.5 if crossed else 0.0, stream_sd=0.2, seed=4)
    folder = write_sweep(t, tmp_path / "sweep")
    plan = json.loads((folder / "sweep.json").read_text()) if (folder / "sweep.json").exists() else {
        "sweep_id": t.sweep_id, "arms": []}
    plan["games_hash"] = t.games_hash
    (folder / "sweep.json").write_text(json.dumps(plan))
    return folder


def rewrite(path: Path, **fields: object) -> None:
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    path.write_text("".join(json.dumps({**r, **fields}) + "\n" for r in rows))


def test_an_arm_of_another_game_list_is_refused_unless_a_list_is_chosen(tmp_path: Path) -> None:
    folder = sweep_folder(tmp_path)
    sweep_hash = json.loads((folder / "sweep.json").read_text())["games_hash"]
    assert [g["used"] for g in compare([folder], "baseline", FAST)["game_lists"]] == [True]
    rewrite(folder / "arms" / "trl@20.jsonl", games_hash="0123456789abcdef")
    with pytest.raises(CompareError, match=rf"^arm 'trl@20' of sweep '.*' carries game list 0123456789abcdef, not the "
                       rf"sweep's {sweep_hash} \(sweep.json\).*\(fix: --games-hash {sweep_hash} to compare"):
        compare([folder], "baseline", FAST)
    doc = compare([folder], "baseline", CompareSettings(n_boot=200, games_hash=sweep_hash))
    assert "trl@20" not in {a["arm"] for a in doc["arms"]} and "trl@10" in {a["arm"] for a in doc["arms"]}
    lists = {g["games_hash"]: g for g in doc["game_lists"]}
    assert lists["0123456789abcdef"]["arms"] == ["trl@20"] and not lists["0123456789abcdef"]["used"]
    assert lists[sweep_hash]["used"] and lists[sweep_hash]["in_manifest"]
    # the other list alone: its one arm, and no baseline on it (refused by the baseline check, naming the arms)
    with pytest.raises(CompareError, match="--baseline: 'baseline' is not an arm here"):
        compare([folder], "baseline", CompareSettings(n_boot=200, games_hash="0123456789abcdef"))
    with pytest.raises(CompareError, match=r"^--games-hash: ffff is not a game list of sweep .* \(fix: one of "):
        compare([folder], "baseline", CompareSettings(n_boot=200, games_hash="ffff"))


def test_rows_that_all_carry_another_list_than_sweep_json_are_refused(tmp_path: Path) -> None:
    """Silent on main: every arm's rows agree with each other, and none with the sweep's own list."""
    folder = sweep_folder(tmp_path)
    for f in (folder / "arms").glob("*.jsonl"):
        rewrite(f, games_hash="0123456789abcdef")
    with pytest.raises(CompareError, match=r"^arm 'baseline' and 6 more of sweep .* carries game list "
                       r"0123456789abcdef, not the sweep's .* \(fix: --games-hash 0123456789abcdef to compare"):
        compare([folder], "baseline", FAST)


def test_cli_refuses_in_one_line_writes_nothing_and_the_report_states_the_lists(tmp_path: Path,
                                                                              capsys: pytest.CaptureFixture) -> None:
    from twinrun.testing.run_folders import folder_digest, run_twinrun

    folder = sweep_folder(tmp_path)
    sweep_hash = json.loads((folder / "sweep.json").read_text())["games_hash"]
    rewrite(folder / "arms" / "verl@10.jsonl", games_hash="0123456789abcdef")
    before = folder_digest(tmp_path)
    code, _, err = run_twinrun(["compare", folder, "--baseline", "baseline", "--out", tmp_path / "report",
                                "--n-boot", "200", "--no-track"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "'verl@10'" in err and "fix: --games-hash" in err, err
    assert folder_digest(tmp_path) == before
    code, _, err = run_twinrun(["compare", folder, "--baseline", "baseline", "--out", tmp_path / "report",
                                "--n-boot", "200", "--no-track", "--games-hash", sweep_hash], capsys)
    assert code == 0, err
    text = (tmp_path / "report" / "report.md").read_text()
    assert (f"Game lists seen: `0123456789abcdef`: 1 arm(s) (`verl@10`), left out; `{sweep_hash}` (sweep.json): 6 "
            f"arm(s), compared on (--games-hash {sweep_hash}).") in text
    saved = json.loads((tmp_path / "report" / "compare.json").read_text())
    assert saved["settings"]["games_hash"] == sweep_hash and len(saved["game_lists"]) == 2


def test_stream_design_crossed_takes_blocks_from_the_rows_positions(tmp_path: Path) -> None:
    """Rows of another harness: a fixed order per stream, no stream plans in sweep.json. auto reads them as nested;
    crossed (the user's statement, borne out by the positions) as blocks, with the numbers a twinrun manifest gives."""
    folder = sweep_folder(tmp_path, streams=3, crossed=True)
    from_manifest = compare([folder], "baseline", FAST)
    assert from_manifest["streams"]["design"] == "crossed"
    plan = json.loads((folder / "sweep.json").read_text())
    del plan["stream_plans"]
    (folder / "sweep.json").write_text(json.dumps(plan))
    assert compare([folder], "baseline", FAST)["streams"]["design"] == "nested"
    stated = compare([folder], "baseline", CompareSettings(n_boot=200, stream_design="crossed"))
    assert stated["streams"]["design"] == "crossed" and stated["streams"]["design_why"].startswith("stated")
    assert stated["pairs"][0]["interaction"] == from_manifest["pairs"][0]["interaction"]
    assert stated["runs"] == from_manifest["runs"]


def test_stream_design_crossed_is_refused_where_the_rows_contradict_it(tmp_path: Path) -> None:
    folder = sweep_folder(tmp_path, streams=3, crossed=True)
    crossed = CompareSettings(n_boot=200, stream_design="crossed")
    f = folder / "arms" / "verl@10#r1.jsonl"
    rows = [json.loads(x) for x in f.read_text().splitlines()]
    swapped = [dict(r) for r in rows]
    swapped[0]["position"], swapped[1]["position"] = rows[1]["position"], rows[0]["position"]
    f.write_text("".join(json.dumps(r) + "\n" for r in swapped))
    with pytest.raises(CompareError, match=r"^--stream-design crossed: stream 1's arms played game '.*' at different "
                       r"positions \(.*\): not one common order \(fix: --stream-design auto or nested\)$"):
        compare([folder], "baseline", crossed)
    f.write_text("".join(json.dumps({**r, "position": None}) + "\n" for r in rows))
    with pytest.raises(CompareError, match=r"^--stream-design crossed: 20 of arm 'verl@10#r1''s rows carry no position"):
        compare([folder], "baseline", crossed)
    one = sweep_folder(tmp_path / "one")
    with pytest.raises(CompareError, match="one stream per arm"):
        compare([one], "baseline", crossed)
