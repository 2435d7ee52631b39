"""The per-look report (issue 41): `compare --looks --out DIR` writes looks.json and report.md's per-look table
(guarded before the first write), `compare SWEEP --out DIR` on a sweep played until decided shows the looks that
sweep.json records, and a look claims differ only through the interaction it spends."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from twinrun.cli import app
from twinrun.core.compare import CompareError, CompareSettings
from twinrun.core.compare import sequential as sq
from twinrun.core.compare.looks import replay
from twinrun.core.compare.looks_report import looks_section
from twinrun.core.compare.synthetic import planted_table, write_sweep

CROSSED = dict(crossed=True, block_sd=0.7, stream_sd=0.1)


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_sweep(planted_table("opposite-0.3", seed=1, streams=4, n_games=140, **CROSSED),
                       tmp_path_factory.mktemp("lr") / "sw")


def test_a_look_claims_differ_only_through_the_interaction() -> None:
    rule = sq.SequentialRule((2, 4, 8))
    levels = rule.levels(8)
    a = levels["interaction"][1]
    opposite = {"a": "a", "b": "b", "verdict": sq.DIFFER, "reason": "opposite", "pearson": -0.9,
                "pearson_ci_family": [-0.99, -0.2], "equivalence": None,
                "interaction": {"statistic": 1.5, "df": 7, "df2": 42.0, "p_value": 0.2, "p_holm_pairs": 0.2}}
    look = sq.take_look({"pairs": [opposite]}, rule, 1, levels, rho0=0.5, delta=0.05)
    assert look.pairs[0]["verdict"] == sq.NO_EVIDENCE and look.pairs[0]["reason"] == "opposite-not-spent"
    assert look.stop is None
    crossed = dict(opposite, interaction=dict(opposite["interaction"], p_value=a / 2, p_holm_pairs=a / 2))
    look = sq.take_look({"pairs": [crossed]}, rule, 1, levels, rho0=0.5, delta=0.05)
    assert look.pairs[0]["verdict"] == sq.DIFFER and look.stop == "decided"
    # the statistic beside its boundary: the critical F at the look's level
    p = look.pairs[0]
    assert p["f_boundary"] == pytest.approx(sq.stats.f.isf(a, 7, 42.0)) and p["interaction_f"] == 1.5


def test_compare_looks_out_writes_looks_json_and_the_report(sweep_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "rep"
    res = CliRunner().invoke(app, ["compare", str(sweep_dir), "--baseline", "baseline", "--looks", "2,4",
                                   "--n-boot", "500", "--out", str(out), "--no-track"])
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "looks.json").read_text())
    assert doc["looks_at"] == [2, 4] and [lk["streams"] for lk in doc["looks"]] == [2, 4]
    text = (out / "report.md").read_text()
    assert "## Looks (group-sequential)" in text and "| look | streams | pair |" in text
    rows = [ln for ln in text.splitlines() if ln.startswith("| 1 |") or ln.startswith("| 2 |")]
    assert len(rows) == 2 and all("a vs b" in r and " vs " in r.split("|")[4] for r in rows)
    assert f"Stopped at {doc['stopped_at']} streams" in text
    assert not list(out.glob(".*tmp*"))  # atomic writes leave no temporary file


def test_compare_looks_out_refuses_a_file_before_any_write(sweep_dir: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "taken"
    blocker.write_text("a file")
    for bad in (blocker, blocker / "sub"):
        res = CliRunner().invoke(app, ["compare", str(sweep_dir), "--baseline", "baseline", "--looks", "2,4",
                                       "--out", str(bad), "--no-track"])
        assert isinstance(res.exception, CompareError) and "(fix: a folder path)" in str(res.exception)
        assert blocker.read_text() == "a file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]


def test_compare_out_shows_the_looks_a_sweep_recorded(sweep_dir: Path, tmp_path: Path) -> None:
    """A sweep played until decided records its looks in sweep.json; compare --out puts them in report.md."""
    from twinrun.core.compare.load import load_game_table

    sw = tmp_path / "sw"
    sw.mkdir()
    for p in sweep_dir.rglob("*"):
        if p.is_file():
            (sw / p.relative_to(sweep_dir)).parent.mkdir(parents=True, exist_ok=True)
            (sw / p.relative_to(sweep_dir)).write_bytes(p.read_bytes())
    seq = replay(load_game_table([sw]), "baseline", CompareSettings(n_boot=500, seed=0), sq.SequentialRule((2, 4)))
    manifest = json.loads((sw / "sweep.json").read_text())
    manifest["sequential"] = seq
    (sw / "sweep.json").write_text(json.dumps(manifest))
    rep = tmp_path / "rep"
    res = CliRunner().invoke(app, ["compare", str(sw), "--baseline", "baseline", "--out", str(rep), "--n-boot", "500",
                                   "--no-track"])
    assert res.exit_code == 0, res.output
    text = (rep / "report.md").read_text()
    assert "## Looks (group-sequential)" in text and text.index("## Looks") > text.index("## Verdict")
    for lk in seq["looks"]:
        assert f"| {lk['look']} | {lk['streams']} | a vs b |" in text


def test_looks_section_reads_an_older_record_without_the_boundaries() -> None:
    seq = {"rule": "r", "looks_at": [2, 4], "stop": "last look", "stopped_at": 4,
           "looks": [{"look": 1, "streams": 2, "alpha": 0.005, "band_level": 0.99, "stop": None,
                      "pairs": [{"a": "a", "b": "b", "verdict": sq.NO_EVIDENCE, "interaction_p": 0.3}]}]}
    text = "\n".join(looks_section(seq))
    assert "| 1 | 2 | a vs b | p 0.3 vs 0.005 |" in text and "Stopped at 4 streams: the last look" in text
