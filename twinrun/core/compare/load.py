"""Loading: per-game arms written by `twinrun sweep`, and published per-checkpoint summaries (CSV)."""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from twinrun.core.compare.blocks import crossed_from_manifest
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


def load_game_table(paths: Sequence[str | Path], *, games_hash: str | None = None,
                    stream_design: str = "auto") -> GameTable:
    """Read per-game eval rows (sweep output) of one sweep from sweep folders and/or arm JSONL files."""
    (table,) = load_game_tables(paths, several=False, games_hash=games_hash, stream_design=stream_design)
    return table


def load_game_tables(paths: Sequence[str | Path], *, several: bool, games_hash: str | None = None,
                     stream_design: str = "auto") -> list[GameTable]:
    """Per-game eval rows, one table per sweep (sorted by executor, then sweep id). Arms of different sweeps are
    refused unless `several` (a comparison across sweeps: each sweep is analysed against its own baseline).

    games_hash: which game list to compare on where a sweep's arms carry more than one (or another than its
    sweep.json's): the arms played on it are kept, the others left out and listed in ``table.game_lists``; without
    it such a sweep is refused. stream_design "crossed": the user states that stream r of every arm played one
    common order (:func:`stated_crossing`); "auto" reads it from sweep.json."""
    from twinrun.core.records import read_jsonl

    files: list[Path] = []
    for p in paths:
        pp = Path(p)
        if not pp.exists():
            raise CompareError(f"input: {str(pp)!r} does not exist (fix: pass a sweep --out folder, arm .jsonl or .csv)")
        files.extend(_arm_files(pp))
    rows_by: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}  # (sweep, arm) -> game -> row
    hash_of_arm: dict[tuple[str, str], str] = {}  # (sweep, arm) -> the game list its rows carry
    seen_files: set[Path] = set()
    manifests: dict[str, dict[str, Any]] = {}  # sweep id -> its sweep.json (where one lies beside the arm files)
    for f in files:
        if f.resolve() in seen_files:
            continue
        seen_files.add(f.resolve())
        plan = _manifest_of(f)
        if plan is not None and plan.get("sweep_id"):
            manifests.setdefault(str(plan["sweep_id"]), plan)
        sweep_of_file: dict[str, tuple[str, str]] = {}
        for n, row in enumerate(read_jsonl(f), 1):
            if row.get("kind") != "eval":
                continue
            for key in ("arm", "game_id", "game_index", "outcome", "sweep_id", "games_hash", "n_games"):
                if key not in row:
                    raise CompareError(f"{f}:{n}: eval row lacks {key!r} (fix: rows must come from `twinrun sweep`)")
            arm, sweep, ghash = row["arm"], row["sweep_id"], row["games_hash"]
            if row["outcome"] not in ("success", "failure", "unmeasured"):
                raise CompareError(f"{f}:{n}: outcome {row['outcome']!r} is not success/failure/unmeasured")
            first = sweep_of_file.setdefault(arm, (sweep, ghash))
            if (sweep, ghash) != first:
                raise CompareError(
                    f"{f}:{n}: arm {arm!r} mixes rows of sweeps {first[0]!r} and {sweep!r} "
                    "(fix: keep one sweep per --out folder)" if sweep != first[0] else
                    f"{f}:{n}: arm {arm!r} mixes rows of game lists {first[1]} and {ghash} (fix: sweep the arm "
                    "again into a new --out folder)"
                )
            if hash_of_arm.setdefault((sweep, arm), ghash) != ghash:
                raise CompareError(f"{f}:{n}: arm {arm!r} has rows of game lists {hash_of_arm[(sweep, arm)]} and "
                                   f"{ghash} in two files (fix: pass one file per arm)")
            per = rows_by.setdefault((sweep, arm), {})
            if row["game_id"] in per:
                raise CompareError(
                    f"{f}:{n}: arm {arm!r} has game {row['game_id']!r} twice (fix: a sweep never writes duplicates; "
                    "do not pass the same arm from two files)"
                )
            per[row["game_id"]] = row
    if not rows_by:
        raise CompareError(f"input: no eval rows in {', '.join(map(str, paths))} (fix: run `twinrun sweep` first)")
    if not several:
        _refuse_mixed_sweeps(list(rows_by))
    lists = {sweep: game_lists(sweep, hash_of_arm, manifests.get(sweep), games_hash)
             for sweep in sorted({sw for sw, _ in rows_by})}
    tables = []
    for sweep, gl in lists.items():
        used = next(g["games_hash"] for g in gl if g["used"])
        kept = {arm: per for (sw, arm), per in rows_by.items() if sw == sweep and hash_of_arm[(sw, arm)] == used}
        t = _table(sweep, kept, used, max(int(r["n_games"]) for per in kept.values() for r in per.values()),
                   _games_of(kept))
        t.game_lists = gl
        positions = _positions_of(kept)
        reps = {a.replicate for a in t.arms}
        t.crossed, t.crossed_why = crossed_from_manifest(manifests.get(sweep), reps, positions)
        if stream_design == "crossed":
            t.crossed, t.crossed_why = stated_crossing(t, manifests.get(sweep), positions)
        # each run's start as the sweep recorded it (sweep.json arms' run_start; absent in older sweeps): seeds
        # pair across groups only from one start (frameworks.seed_pairing)
        starts = {a.get("arm"): (a.get("run_start"), a.get("run_start_hash"))
                  for a in (manifests.get(sweep) or {}).get("arms") or [] if isinstance(a, dict)}
        for a in t.arms:
            a.run_start, a.run_start_hash = starts.get(a.name, (None, None))
        tables.append(t)
    return sorted(tables, key=lambda t: (t.executor or "", t.sweep_id or ""))


def _games_of(rows_by_arm: dict[str, dict[str, dict[str, Any]]]) -> dict[int, tuple[str, str]]:
    """game index -> (game id, task type), from the rows (the first arm that played it)."""
    games: dict[int, tuple[str, str]] = {}
    for per in rows_by_arm.values():
        for row in per.values():
            games.setdefault(int(row["game_index"]), (row["game_id"], row.get("task_type") or ""))
    return games


def _positions_of(rows_by_arm: dict[str, dict[str, dict[str, Any]]]) -> dict[tuple[str, int], dict[int, int]]:
    """(arm, stream) -> game index -> the 1-based position its stream played the game at (rows that carry one)."""
    out: dict[tuple[str, int], dict[int, int]] = {}
    for arm, per in rows_by_arm.items():
        for row in per.values():
            if row.get("position") is not None:
                out.setdefault((arm, int(row.get("replicate") or 0)), {})[int(row["game_index"])] = int(row["position"])
    return out


def game_lists(sweep: str, hash_of_arm: dict[tuple[str, str], str], manifest: dict[str, Any] | None,
               chosen: str | None) -> list[dict[str, Any]]:
    """The game lists one sweep's arms were played on, and which one a comparison uses: [{games_hash, arms (their
    names), in_manifest (sweep.json's list), used}]. One list (the rows' and sweep.json's alike) is used as it is;
    more than one is refused in one line unless `chosen` (``compare --games-hash``) names one the arms carry."""
    by: dict[str, list[str]] = {}
    for (sw, arm), h in sorted(hash_of_arm.items()):
        if sw == sweep:
            by.setdefault(h, []).append(arm)
    planned = (manifest or {}).get("games_hash")
    hashes = sorted(set(by) | ({planned} if planned else set()))
    if chosen is not None and chosen not in by:
        raise CompareError(f"--games-hash: {chosen} is not a game list of sweep {sweep!r}'s arms (fix: one of "
                           f"{', '.join(sorted(by))})")
    if len(hashes) > 1 and chosen is None:
        if planned:  # sweep.json names the sweep's list: the arms on another one are named
            odd = [h for h in sorted(by) if h != planned]
            arms = [a for h in odd for a in by[h]]
            more = f" and {len(arms) - 1} more" if len(arms) > 1 else ""
            keep = planned if planned in by else odd[0]
            raise CompareError(
                f"arm {arms[0]!r}{more} of sweep {sweep!r} carries game list {hash_of_arm[(sweep, arms[0])]}, not "
                f"the sweep's {planned} (sweep.json): other games than the sweep's (fix: --games-hash {keep} to "
                "compare the arms played on that list, or sweep the arm again into a new --out folder)")
        desc = "; ".join(f"{h}: {len(by[h])} arm(s), e.g. {by[h][0]}" for h in sorted(by))
        raise CompareError(f"arms of sweep {sweep!r} were played on {len(by)} different game lists ({desc}) (fix: "
                           f"--games-hash {sorted(by)[0]} to compare the arms of one list)")
    used = chosen if chosen is not None else next(iter(by))
    return [{"games_hash": h, "arms": by.get(h, []), "in_manifest": h == planned, "used": h == used}
            for h in hashes]


def stated_crossing(table: GameTable, manifest: dict[str, Any] | None,
                    positions: dict[tuple[str, int], dict[int, int]]) -> tuple[bool, str]:
    """``--stream-design crossed``: the user states that stream r of every arm played one common order with shared
    seeds (rows another harness wrote, with no sweep.json stream plans). The rows must bear it out: every row
    carries its position, and within each stream every arm played each game at the same position. Refused in one
    line where they do not; the seeds cannot be read from rows and stay the user's statement. -> (True, why)."""
    reps = sorted({a.replicate for a in table.arms})
    if len(reps) < 2:
        raise CompareError("--stream-design crossed: the rows hold one stream per arm; crossed streams need 2 or more "
                           "(fix: drop --stream-design crossed)")
    for a_i, arm in enumerate(table.arms):
        played = int(np.isfinite(table.outcomes[a_i]).sum()) + arm.n_unmeasured
        have = len(positions.get((arm.name, arm.replicate), {}))
        if have < played:
            raise CompareError(f"--stream-design crossed: {played - have} of arm {arm.name!r}'s rows carry no position "
                               "(where its stream played the game) (fix: rows with a 1-based position, or "
                               "--stream-design auto)")
    for r in reps:
        first: dict[int, tuple[str, int]] = {}  # game index -> (arm, position) of the first arm of stream r
        for (arm, rep), pos in sorted(positions.items()):
            if rep != r:
                continue
            for g, p in sorted(pos.items()):
                other = first.setdefault(g, (arm, p))
                if other[1] != p:
                    gid = table.game_ids[g] if 0 <= g < len(table.game_ids) else g
                    raise CompareError(
                        f"--stream-design crossed: stream {r}'s arms played game {gid!r} at different positions "
                        f"({other[0]}: {other[1]}, {arm}: {p}): not one common order (fix: --stream-design auto or "
                        "nested)")
    src = "; sweep.json's stream plans agree" if crossed_from_manifest(manifest, set(reps), positions)[0] else ""
    return True, (f"stated (--stream-design crossed): the rows' positions show one common order per stream across "
                  f"every arm ({len(reps)} streams){src}; shared seeds are the user's statement: streams are blocks "
                  "crossed with the arms")


def _manifest_of(f: Path) -> dict[str, Any] | None:
    """The sweep.json of an arm file's sweep folder (``DIR/arms/ARM.jsonl`` or ``DIR/ARM.jsonl``), if any: it says
    whether the streams were played with shared plans (crossed with the arms)."""
    for d in (f.parent.parent, f.parent) if f.parent.name == "arms" else (f.parent,):
        m = d / "sweep.json"
        if m.is_file():
            try:
                out = json.loads(m.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                return None
            return out if isinstance(out, dict) else None
    return None


def _table(sweep: str, rows_by_arm: dict[str, dict[str, dict[str, Any]]], ghash: str, n_games: int,
           games: dict[int, tuple[str, str]]) -> GameTable:
    game_ids = [games[i][0] if i in games else f"<unplayed #{i}>" for i in range(n_games)]
    task_types = [games[i][1] if i in games else "" for i in range(n_games)]
    index = {g: i for i, g in enumerate(game_ids)}
    meta = {arm: next(iter(per.values())) for arm, per in rows_by_arm.items()}
    arms: list[ArmInfo] = []
    out = np.full((len(rows_by_arm), n_games), np.nan)
    for a, (name, per) in enumerate(sorted(rows_by_arm.items(), key=lambda kv: _arm_sort_key(meta[kv[0]]))):
        m = meta[name]
        prov = m.get("provenance") or {}
        unmeasured = 0
        for gid, row in per.items():
            if gid not in index:
                raise CompareError(f"arm {name!r}: game {gid!r} is not in the sweep's game list (fix: rerun the sweep)")
            if row["outcome"] == "unmeasured":
                unmeasured += 1
            else:
                out[a, index[gid]] = 1.0 if row["outcome"] == "success" else 0.0
        run = m.get("run")
        arms.append(ArmInfo(
            name=name, run=run, checkpoint=m.get("checkpoint_step"), replicate=int(m.get("replicate") or 0),
            role=m.get("role") or ("baseline" if run is None else "checkpoint"),
            n_unmeasured=unmeasured, n_missing=n_games - len(per),
            # the run's backend and training seed as the sweep recorded them from the run's own records
            framework=prov.get("backend") if run is not None else None,
            seed=m.get("run_seed") if run is not None else None,
            checkpoint_hash=prov.get("checkpoint_hash"),
        ))
    executors = sorted({str(r.get("executor")) for per in rows_by_arm.values() for r in per.values() if r.get("executor")})
    if len(executors) > 1:
        raise CompareError(f"sweep {sweep!r}: rows name {len(executors)} executors ({', '.join(executors)}) "
                           "(fix: one sweep plays one executor; sweep again into a new --out folder)")
    return GameTable(arms, out, game_ids, sweep, ghash, task_types, executors[0] if executors else None)


def _arm_sort_key(row: dict[str, Any]) -> tuple:
    return (row.get("run") is not None, str(row.get("run") or ""), row.get("checkpoint_step") or -1,
            int(row.get("replicate") or 0), row["arm"])


def _refuse_mixed_sweeps(keys: list[tuple[str, str]]) -> None:
    """keys: (sweep, arm) of every arm read. One sweep, else refuse (its game lists: :func:`game_lists`)."""
    sweeps = sorted({sw for sw, _ in keys})
    if len(sweeps) > 1:
        by = {s: sorted(a for sw, a in keys if sw == s)[:3] for s in sweeps}
        desc = "; ".join(f"sweep {s!r}: {', '.join(a)}" for s, a in by.items())
        raise CompareError(
            f"arms come from {len(sweeps)} different sweeps ({desc}); pairing needs one sweep and its own baseline "
            "(fix: evaluate all runs in one `twinrun sweep`, or --across executor for sweeps of other executors)"
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
    """Read published per-checkpoint summaries of one executor: columns run,checkpoint,n,successes[,b,c]
    [,framework,seed]."""
    tables = load_summary_tables(path, baseline)
    if len(tables) > 1:
        raise CompareError(f"{path}: rows of {len(tables)} executors ({', '.join(str(t.executor) for t in tables)}) "
                           "(fix: --across executor to compare them, or one executor per CSV)")
    return tables[0]


def load_summary_tables(path: str | Path, baseline: str) -> list[SummaryTable]:
    """Published per-checkpoint summaries: columns run,checkpoint,n,successes[,b,c][,framework,seed][,executor].
    With an executor column, one table per executor, each with its own baseline row."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise CompareError(f"input: {str(p)!r} cannot be read ({e.strerror}; fix: pass an existing CSV)") from None
    reader = csv.DictReader(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    cols = [c.strip() for c in (reader.fieldnames or [])]
    missing = [c for c in ("run", "checkpoint", "n", "successes") if c not in cols]
    if missing:
        raise CompareError(f"{p}: column {missing[0]!r} is missing (fix: header run,checkpoint,n,successes[,b,c])")
    by_exec: dict[str | None, list[ArmInfo]] = {}
    seen: set[tuple[str | None, str, int | None]] = set()
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
        seed = _int_field(row.get("seed", ""), "seed", where, optional=True)
        executor = row.get("executor") or None
        assert n is not None and s is not None
        if n == 0:
            raise CompareError(f"{where}: n=0 (fix: a summary row needs at least one measured game)")
        if s > n:
            raise CompareError(f"{where}: successes={s} exceeds n={n} (fix: successes <= n)")
        if (b is None) != (c is None):
            raise CompareError(f"{where}: only one of b, c is given (fix: give both discordant counts or neither)")
        if b is not None and c is not None and b + c > n:
            raise CompareError(f"{where}: b + c = {b + c} exceeds n={n} (fix: discordant games are a subset of n)")
        key = (executor, run, None if is_base else ck)
        if key in seen:
            raise CompareError(f"{where}: run={run!r} checkpoint={ck} appears twice"
                               + (f" for executor {executor!r}" if executor else "")
                               + " (fix: one row per run and checkpoint)")
        seen.add(key)
        name = baseline if is_base else f"{run}@{ck}"
        by_exec.setdefault(executor, []).append(ArmInfo(
            name=name, run=None if is_base else run, checkpoint=None if is_base else ck,
            role="baseline" if is_base else "checkpoint", n=n, successes=s, b=b, c=c,
            framework=(row.get("framework") or None) if not is_base else None, seed=None if is_base else seed))
    tables = []
    for executor, arms in sorted(by_exec.items(), key=lambda kv: kv[0] or ""):
        of = f" for executor {executor!r}" if executor else ""
        bases = [a for a in arms if a.role == "baseline"]
        if len(bases) != 1:
            raise CompareError(f"{p}: {len(bases)} rows with run={baseline!r}{of} (fix: exactly one baseline row"
                               f"{' per executor' if executor else ''}, or pass --baseline NAME)")
        if len(arms) < 2:
            raise CompareError(f"{p}: no checkpoint rows besides the baseline{of} (fix: add run,checkpoint rows)")
        tables.append(SummaryTable(arms, str(p), executor))
    return tables
