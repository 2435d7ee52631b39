"""Loading: per-game arms written by `twinrun sweep`, and published per-checkpoint summaries (CSV)."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from twinrun.core.compare.model import ArmInfo, CompareError, GameTable, SummaryTable

# Loading


def _arm_files(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted((path / "arms").glob("*.jsonl")) if (path / "arms").is_dir() else sorted(path.glob("*.jsonl"))
        if not files:
            raise CompareError(f"input: {str(path)!r} holds no arm files (fix: pass a sweep --out folder or arm .jsonl files)")
        return files
    if path.suffix == ".jsonl":
        return [path]
    raise CompareError(f"input: {str(path)!r} is neither a sweep folder, a .jsonl arm nor a .csv summary (fix: check the path)")


def load_game_table(paths: Sequence[str | Path]) -> GameTable:
    """Read per-game eval rows (sweep output) from sweep folders and/or arm JSONL files."""
    from twinrun.core.records import read_jsonl

    files: list[Path] = []
    for p in paths:
        pp = Path(p)
        if not pp.exists():
            raise CompareError(f"input: {str(pp)!r} does not exist (fix: pass a sweep --out folder, arm .jsonl or .csv)")
        files.extend(_arm_files(pp))
    rows_by_arm: dict[str, dict[str, dict[str, Any]]] = {}
    meta: dict[str, dict[str, Any]] = {}
    sweep_of: dict[str, str] = {}
    hash_of: dict[str, str] = {}
    n_games_of: dict[str, int] = {}
    games: dict[int, tuple[str, str]] = {}
    seen_files: set[Path] = set()
    for f in files:
        if f.resolve() in seen_files:
            continue
        seen_files.add(f.resolve())
        for n, row in enumerate(read_jsonl(f), 1):
            if row.get("kind") != "eval":
                continue
            for key in ("arm", "game_id", "game_index", "outcome", "sweep_id", "games_hash", "n_games"):
                if key not in row:
                    raise CompareError(f"{f}:{n}: eval row lacks {key!r} (fix: rows must come from `twinrun sweep`)")
            arm = row["arm"]
            if row["outcome"] not in ("success", "failure", "unmeasured"):
                raise CompareError(f"{f}:{n}: outcome {row['outcome']!r} is not success/failure/unmeasured")
            sweep_of.setdefault(arm, row["sweep_id"])
            hash_of.setdefault(arm, row["games_hash"])
            n_games_of.setdefault(arm, int(row["n_games"]))
            if row["sweep_id"] != sweep_of[arm] or row["games_hash"] != hash_of[arm]:
                raise CompareError(
                    f"{f}:{n}: arm {arm!r} mixes rows of sweeps {sweep_of[arm]!r} and {row['sweep_id']!r} "
                    "(fix: keep one sweep per --out folder)"
                )
            per = rows_by_arm.setdefault(arm, {})
            if row["game_id"] in per:
                raise CompareError(
                    f"{f}:{n}: arm {arm!r} has game {row['game_id']!r} twice (fix: a sweep never writes duplicates; "
                    "do not pass the same arm from two files)"
                )
            per[row["game_id"]] = row
            meta.setdefault(arm, row)
            games.setdefault(int(row["game_index"]), (row["game_id"], row.get("task_type") or ""))
    if not rows_by_arm:
        raise CompareError(f"input: no eval rows in {', '.join(map(str, paths))} (fix: run `twinrun sweep` first)")
    _refuse_mixed_sweeps(sweep_of, hash_of)
    n_games = max(n_games_of.values())
    game_ids = [games[i][0] if i in games else f"<unplayed #{i}>" for i in range(n_games)]
    task_types = [games[i][1] if i in games else "" for i in range(n_games)]
    index = {g: i for i, g in enumerate(game_ids)}
    arms: list[ArmInfo] = []
    out = np.full((len(rows_by_arm), n_games), np.nan)
    for a, (name, per) in enumerate(sorted(rows_by_arm.items(), key=lambda kv: _arm_sort_key(meta[kv[0]]))):
        m = meta[name]
        unmeasured = 0
        for gid, row in per.items():
            if gid not in index:
                raise CompareError(f"arm {name!r}: game {gid!r} is not in the sweep's game list (fix: rerun the sweep)")
            if row["outcome"] == "unmeasured":
                unmeasured += 1
            else:
                out[a, index[gid]] = 1.0 if row["outcome"] == "success" else 0.0
        arms.append(ArmInfo(
            name=name, run=m.get("run"), checkpoint=m.get("checkpoint_step"), replicate=int(m.get("replicate") or 0),
            role=m.get("role") or ("baseline" if m.get("run") is None else "checkpoint"),
            n_unmeasured=unmeasured, n_missing=n_games - len(per),
        ))
    return GameTable(arms, out, game_ids, next(iter(sweep_of.values())), next(iter(hash_of.values())), task_types)


def _arm_sort_key(row: dict[str, Any]) -> tuple:
    return (row.get("run") is not None, str(row.get("run") or ""), row.get("checkpoint_step") or -1,
            int(row.get("replicate") or 0), row["arm"])


def _refuse_mixed_sweeps(sweep_of: dict[str, str], hash_of: dict[str, str]) -> None:
    sweeps = sorted(set(sweep_of.values()))
    if len(sweeps) > 1:
        by = {s: sorted(a for a, v in sweep_of.items() if v == s)[:3] for s in sweeps}
        desc = "; ".join(f"sweep {s!r}: {', '.join(a)}" for s, a in by.items())
        raise CompareError(
            f"arms come from {len(sweeps)} different sweeps ({desc}); pairing needs one sweep and its own baseline "
            "(fix: evaluate all runs in one `twinrun sweep`)"
        )
    hashes = sorted(set(hash_of.values()))
    if len(hashes) > 1:
        raise CompareError(
            f"arms were played on {len(hashes)} different game lists ({', '.join(hashes)}) "
            "(fix: compare arms of one sweep, which plays one game list)"
        )


def _int_field(value: str, name: str, where: str, *, optional: bool = False) -> int | None:
    v = (value or "").strip()
    if v == "" and optional:
        return None
    try:
        out = int(v)
    except ValueError:
        raise CompareError(f"{where}: {name}={value!r} is not an integer (fix: write a whole number)") from None
    if out < 0:
        raise CompareError(f"{where}: {name}={out} is negative (fix: counts are >= 0)")
    return out


def load_summary_csv(path: str | Path, baseline: str) -> SummaryTable:
    """Read published per-checkpoint summaries: columns run,checkpoint,n,successes[,b,c]."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise CompareError(f"input: {str(p)!r} cannot be read ({e.strerror}; fix: pass an existing CSV)") from None
    reader = csv.DictReader(text.splitlines())
    cols = [c.strip() for c in (reader.fieldnames or [])]
    missing = [c for c in ("run", "checkpoint", "n", "successes") if c not in cols]
    if missing:
        raise CompareError(f"{p}: column {missing[0]!r} is missing (fix: header run,checkpoint,n,successes[,b,c])")
    arms: list[ArmInfo] = []
    seen: set[tuple[str, int | None]] = set()
    for line, raw in enumerate(reader, 2):
        row = {k.strip(): (v or "").strip() for k, v in raw.items() if k is not None}
        where = f"{p}:{line}"
        run = row["run"]
        if not run:
            raise CompareError(f"{where}: run is empty (fix: name the run, or {baseline!r} for the baseline)")
        is_base = run == baseline
        ck = _int_field(row["checkpoint"], "checkpoint", where, optional=is_base)
        n = _int_field(row["n"], "n", where)
        s = _int_field(row["successes"], "successes", where)
        b = _int_field(row.get("b", ""), "b", where, optional=True)
        c = _int_field(row.get("c", ""), "c", where, optional=True)
        assert n is not None and s is not None
        if n == 0:
            raise CompareError(f"{where}: n=0 (fix: a summary row needs at least one measured game)")
        if s > n:
            raise CompareError(f"{where}: successes={s} exceeds n={n} (fix: successes <= n)")
        if (b is None) != (c is None):
            raise CompareError(f"{where}: only one of b, c is given (fix: give both discordant counts or neither)")
        if b is not None and c is not None and b + c > n:
            raise CompareError(f"{where}: b + c = {b + c} exceeds n={n} (fix: discordant games are a subset of n)")
        key = (run, None if is_base else ck)
        if key in seen:
            raise CompareError(f"{where}: run={run!r} checkpoint={ck} appears twice (fix: one row per run and checkpoint)")
        seen.add(key)
        name = baseline if is_base else f"{run}@{ck}"
        arms.append(ArmInfo(name=name, run=None if is_base else run, checkpoint=None if is_base else ck,
                            role="baseline" if is_base else "checkpoint", n=n, successes=s, b=b, c=c))
    bases = [a for a in arms if a.role == "baseline"]
    if len(bases) != 1:
        raise CompareError(
            f"{p}: {len(bases)} rows with run={baseline!r} (fix: exactly one baseline row, or pass --baseline NAME)"
        )
    if len(arms) < 2:
        raise CompareError(f"{p}: no checkpoint rows besides the baseline (fix: add run,checkpoint rows)")
    return SummaryTable(arms, str(p))
