"""Proof that twinrun's cached ALFWorld engine plays the same games as raw textworld.

A *trace* is what an engine shows over two episodes of one game: the handcoded expert's plan played to the end
(at most ``EXPERT_STEPS`` actions), then ``RANDOM_STEPS`` actions drawn uniformly from the admissible commands
with a seed fixed by the game id. Every state of both episodes (reset included) is reduced to its feedback text,
admissible commands, score, done and won flags and the expert's plan, and hashed; the trace is the list of
those step hashes.

    python -m twinrun.testing.alfworld_traces record --data $ALFWORLD_DATA --out tests/data/alfworld_raw_traces.json
    python -m twinrun.testing.alfworld_traces check  --data $ALFWORLD_DATA --traces tests/data/alfworld_raw_traces.json

``record`` plays every game through raw textworld (``textworld.start`` per game, alfworld's wrappers, nothing
cached; ~3 CPU-s per game) and writes the traces with the versions of the engine packages and a hash of each
game's files; finished games go to ``<out>.partial`` as they come, and a cut-off run resumes from there. ``check`` plays every game through the cached engine (engines reused across games) and reports
every game whose trace differs; the test suite runs the same comparison (``tests/core/envs/test_alfworld_identity.py``).
Both fan out over worker processes (``--workers``) and print progress.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata as md
import json
import multiprocessing as mp
import os
import random
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

EXPERT_STEPS = 50
RANDOM_STEPS = 8
ENGINE_PACKAGES = ("textworld", "alfworld", "fast-downward-textworld", "TatSu")
FORMAT = 1


def game_seed(game_id: str) -> int:
    return int.from_bytes(hashlib.sha256(game_id.encode()).digest()[:4], "big")


def state_record(state: Any, score: float | None = None, done: bool | None = None) -> dict[str, Any]:
    """What the agent can observe of an engine state (twinrun's Observation and Step are functions of it)."""
    return {
        "feedback": state["feedback"],
        "admissible": list(state["admissible_commands"]),
        "won": bool(state["won"]),
        "plan": list(state.get("extra.expert_plan") or []),
        "score": score,
        "done": done,
    }


def _hash(record: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()[:12]


def play_episode(engine: Any, seed: int, choose: Callable[[Any, random.Random], str], max_steps: int
                 ) -> Iterator[tuple[str | None, dict[str, Any]]]:
    """Reset `engine` and play until done or `max_steps`; yields (action, record) with action None for the reset.

    The global `random` (alfworld's expert draws from it) is seeded at the reset; `choose` picks each action from
    the state with its own seeded stream."""
    random.seed(seed)
    rng = random.Random(seed + 1)
    state = engine.reset()
    yield None, state_record(state)
    for _ in range(max_steps):
        action = choose(state, rng)
        state, score, done = engine.step(action)
        yield action, state_record(state, float(score), bool(done))
        if done:
            return


def expert_action(state: Any, _rng: random.Random) -> str:
    plan = state.get("extra.expert_plan") or []
    return plan[0] if plan else "look"


def random_action(state: Any, rng: random.Random) -> str:
    return rng.choice(sorted(state["admissible_commands"]))


def game_trace(engine: Any, game_id: str, records: list | None = None) -> dict[str, Any]:
    """Both episodes of one game on a started `engine`; `records` (optional) collects the full step records."""
    seed = game_seed(game_id)
    out: dict[str, Any] = {}
    for name, choose, steps in (("expert", expert_action, EXPERT_STEPS), ("random", random_action, RANDOM_STEPS)):
        hashes, actions = [], []
        for action, rec in play_episode(engine, seed, choose, steps):
            hashes.append(_hash(rec))
            actions.append(action)
            if records is not None:
                records.append((name, action, rec))
        out[name] = {"hashes": hashes, "actions": actions[1:], "won": rec["won"]}
    return out


def files_hash(game_file: str | Path) -> str:
    """sha256 of the game file and its traj_data.json (the expert reads the latter)."""
    h = hashlib.sha256()
    for p in (Path(game_file), Path(game_file).with_name("traj_data.json")):
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def engine_versions() -> dict[str, str]:
    return {p: md.version(p) for p in ENGINE_PACKAGES}


def all_games(data_root: str | Path) -> list[tuple[str, str]]:
    """(game_id, path) of every game under every split, in catalog order."""
    from twinrun.core.envs.alfworld import AlfWorldCatalog

    root = Path(data_root)
    out = []
    for split in sorted(p.name for p in (root / "json_2.1.1").iterdir() if p.is_dir()):
        out += [(g.game_id, g.path) for g in AlfWorldCatalog(root, split).games()]
    return out


# -- playing many games, in worker processes -------------------------------------------------------------------


def _raw_traces(batch: list[tuple[str, str]]) -> list[tuple[str, dict[str, Any]]]:
    from twinrun.core.envs.alfworld_engine import close_quietly, start_textworld

    out = []
    for game_id, path in batch:
        engine = start_textworld(path, "handcoded")
        try:
            out.append((game_id, {"files": files_hash(path), **game_trace(engine, game_id)}))
        finally:
            close_quietly(engine)
    return out


_CACHE: Any = None


def _cached_traces(batch: list[tuple[str, str]]) -> list[tuple[str, dict[str, Any]]]:
    """The cached engine as twinrun runs it: a few engines reused across games, assets in an LRU."""
    from twinrun.core.envs.alfworld_engine import EngineCache, TextWorldAssets

    global _CACHE
    if _CACHE is None:
        _CACHE = EngineCache(max_idle=2, assets=TextWorldAssets(max_games=8))
    out = []
    for game_id, path in batch:
        engine = _CACHE.checkout(path, "handcoded")
        with _CACHE.scope("handcoded"):
            trace = game_trace(engine, game_id)
        _CACHE.checkin(path, "handcoded", engine)
        out.append((game_id, {"files": files_hash(path), **trace}))
    return out


def play_all(games: list[tuple[str, str]], *, cached: bool, workers: int, label: str,
             log: Callable[[str], None] = print,
             sink: Callable[[list[tuple[str, dict[str, Any]]]], None] | None = None) -> dict[str, dict[str, Any]]:
    """Traces of `games` in `workers` spawned processes (0: in this process), with progress lines on `log`;
    `sink` (optional) gets each finished batch as it comes."""
    fn = _cached_traces if cached else _raw_traces
    batches = [games[i:i + 4] for i in range(0, len(games), 4)]
    out: dict[str, dict[str, Any]] = {}
    t0 = time.monotonic()
    last = 0.0

    def collect(results: Iterable[list[tuple[str, dict[str, Any]]]]) -> None:
        nonlocal last
        for res in results:
            out.update(res)
            if sink is not None:
                sink(res)
            now = time.monotonic()
            if now - last > 10 or len(out) == len(games):
                last = now
                log(f"{label}: {len(out)}/{len(games)} games, {now - t0:.0f} s")

    if workers <= 0:
        collect(map(fn, batches))
    else:
        # spawned, not forked: the parent may hold threads; the children import only the engine
        with mp.get_context("spawn").Pool(workers) as pool:
            collect(pool.imap(fn, batches))
    return out


def compare(recorded: dict[str, Any], live: dict[str, dict[str, Any]]) -> list[str]:
    """One line per difference between recorded raw traces and `live` ones (empty: identical)."""
    problems = []
    if recorded.get("format") != FORMAT:
        return [f"traces file format {recorded.get('format')!r} != {FORMAT} (fix: re-record)"]
    if recorded["versions"] != engine_versions():
        problems.append(f"engine packages {engine_versions()} differ from the recording's {recorded['versions']} "
                        "(fix: re-record with `python -m twinrun.testing.alfworld_traces record`)")
    games = recorded["games"]
    for gid in sorted(set(games) | set(live)):
        if gid not in live:
            problems.append(f"{gid}: recorded but not played (fix: point --data at the recorded data)")
            continue
        if gid not in games:
            problems.append(f"{gid}: played but not recorded (fix: re-record)")
            continue
        want, got = games[gid], live[gid]
        if want["files"] != got["files"]:
            problems.append(f"{gid}: game files changed since the recording (fix: re-record)")
            continue
        for ep in ("expert", "random"):
            w, g = want[ep]["hashes"], got[ep]["hashes"]
            if w == g:
                continue
            i = next((k for k, (a, b) in enumerate(zip(w, g)) if a != b), min(len(w), len(g)))
            acts = got[ep]["actions"]
            act = "reset" if i == 0 else repr(acts[i - 1]) if i - 1 < len(acts) else "(episode ended)"
            problems.append(f"{gid}: {ep} episode differs at step {i} ({act}); raw {len(w)} states, cached {len(g)}")
    return problems


def write_traces(path: str | Path, traces: dict[str, dict[str, Any]]) -> None:
    """The recording, one game per line (actions left out: the live side names them), written atomically."""
    head = {"format": FORMAT, "versions": engine_versions(), "expert_steps": EXPERT_STEPS, "random_steps": RANDOM_STEPS}
    lines = [json.dumps(head, sort_keys=True)[:-1] + ', "games": {']
    rows = []
    for gid, t in sorted(traces.items()):
        slim = {"files": t["files"], **{ep: {"hashes": t[ep]["hashes"], "won": t[ep]["won"]} for ep in ("expert", "random")}}
        rows.append(f"{json.dumps(gid)}: {json.dumps(slim, sort_keys=True)}")
    text = "\n".join(lines + [",\n".join(rows), "}}"]) + "\n"
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(out)


def resume_record(games: list[tuple[str, str]], partial: Path) -> dict[str, dict[str, Any]]:
    """Traces already in `partial` (a cut-off `record`) that still hold: same engine versions, same game files."""
    if not partial.exists():
        return {}
    lines = partial.read_text(encoding="utf-8").splitlines()
    if not lines or json.loads(lines[0]) != engine_versions():
        return {}
    paths = dict(games)
    done = {}
    for line in lines[1:]:
        try:
            batch = json.loads(line)
        except json.JSONDecodeError:  # the line being written when the run was cut off
            continue
        for gid, t in batch:
            if gid in paths and t["files"] == files_hash(paths[gid]):
                done[gid] = t
    return done


def record(games: list[tuple[str, str]], out: str | Path, workers: int) -> dict[str, dict[str, Any]]:
    """Raw traces of `games` written to `out`; finished batches go to `out`.partial first, so a cut-off run
    resumes where it stopped."""
    partial = Path(f"{out}.partial")
    done = resume_record(games, partial)
    todo = [g for g in games if g[0] not in done]
    if done:
        print(f"resuming: {len(done)} games recorded in {partial}, {len(todo)} to go")
    else:
        partial.parent.mkdir(parents=True, exist_ok=True)
        partial.write_text(json.dumps(engine_versions()) + "\n", encoding="utf-8")
    with partial.open("a", encoding="utf-8") as f:

        def sink(batch: list[tuple[str, dict[str, Any]]]) -> None:
            f.write(json.dumps(batch) + "\n")
            f.flush()

        traces = {**done, **play_all(todo, cached=False, workers=workers, label="raw textworld", sink=sink)}
    write_traces(out, traces)
    partial.unlink()
    return traces


def load_traces(path: str | Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m twinrun.testing.alfworld_traces", description=__doc__.split("\n")[0])
    ap.add_argument("command", choices=["record", "check"])
    ap.add_argument("--data", default=os.environ.get("ALFWORLD_DATA"), help="ALFWorld data folder (json_2.1.1/)")
    ap.add_argument("--out", "--traces", dest="traces", default="tests/data/alfworld_raw_traces.json")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    if not args.data or not Path(args.data, "json_2.1.1").is_dir():
        print("--data: not an ALFWorld data folder with json_2.1.1/ (fix: pass --data or set ALFWORLD_DATA)")
        return 2
    games = all_games(args.data)
    if args.command == "record":
        traces = record(games, args.traces, args.workers)
        print(f"wrote {len(traces)} raw traces to {args.traces}")
        return 0
    recorded = load_traces(args.traces)
    live = play_all(games, cached=True, workers=args.workers, label="cached engine")
    problems = compare(recorded, live)
    for p in problems:
        print(p)
    print(f"{len(live)} games: {'identical' if not problems else f'{len(problems)} differences'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
