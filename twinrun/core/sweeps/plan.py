"""The sweep's plan (`sweep.json`, the manifest): which arms, which games, which checkpoints, with their content
hashes, and the replicate streams every arm is played as. Split from :mod:`twinrun.core.sweeps.sweep` (which runs the
arms and re-exports these names).

**Streams** (docs/streams.md). With ``streams: R`` every checkpoint arm and the baseline is played R times on the
same games; stream r is the arm's ``replicate`` (arm name suffix ``#r{r}`` for r > 0). Stream r has its own play
order (a seeded permutation of the sweep's game list; stream 0 plays the list's own order), its own executor
seeds (:func:`executor_seed`; stream 0's are the seeds a one-stream sweep uses) and its own curator sampling seed,
and starts from an empty skill repository. Stream r of every arm shares that order and those executor seeds, so
arms stay paired game by game within a stream. The manifest records each stream's order, order seed and seeds.
A manifest written before streams existed has ``streams: null``: it resumes as one stream (its ``--replicates``
arms, if any, in the sweep's order)."""

from __future__ import annotations

import hashlib
import json
import random
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from twinrun.core.errors import TwinrunError
from twinrun.core.records import RunPaths, atomic_write_json, read_jsonl, twinrun_version

SWEEP_SCHEMA_VERSION = 1
ARMS_DIR = "arms"
MANIFEST = "sweep.json"
BASELINE = "baseline"


class SweepError(TwinrunError, ValueError):
    """A sweep that cannot run as asked (one line: what, which value, fix)."""


def games_hash(game_ids: Sequence[str]) -> str:
    """sha256[:16] of the ordered game list: arms are paired only on the same list."""
    return hashlib.sha256(json.dumps(list(game_ids)).encode()).hexdigest()[:16]


# ------------------------------------------------------------------------------------------------------------
# Plan (the manifest)


@dataclass(frozen=True)
class ArmPlan:
    arm: str
    role: Literal["baseline", "checkpoint"]
    replicate: int = 0
    run: str | None = None
    run_dir: str | None = None
    backend: str | None = None
    run_spec_hash: str | None = None
    checkpoint_step: int | None = None
    checkpoint_path: str | None = None
    checkpoint_hash: str | None = None
    checkpoint_stat: str | None = None  # fingerprint of names, sizes, mtimes (when to re-hash)
    run_seed: int | None = None  # the training run's seed (its records' provenance, else its spec.yaml)
    # the training run's start: the curator model its first step trained from, as its resolved config names it (the
    # warm start's folder name, or a hub id); seeds pair across frameworks only from one start (docs/compare.md)
    run_start: str | None = None
    # sha256[:16] of that start's weight files where it is a local folder (:func:`start_weights_hash`); None: a hub
    # id, a folder not found here, or a sweep older than this field ("start not recorded by hash")
    run_start_hash: str | None = None
    # placement, rewritten each time the arm is started (docs/scale.md): the torch device its curator was loaded
    # on ("cpu", "cuda:3"; under Ray "cuda:0" of the GPUs Ray gave it), the physical GPU ids it was given (as
    # CUDA_VISIBLE_DEVICES says them; Ray: its GPU ids on `host`), the wave of a local --gpus sweep, the host
    device: str | None = None
    gpus: str | None = None
    wave: int | None = None
    host: str | None = None


@dataclass(frozen=True)
class StreamPlan:
    """One replicate stream: every arm with ``replicate == stream`` plays the games in ``order`` (indices into
    the sweep's game list) with these executor seeds (by index into the game list) and this curator seed."""

    stream: int
    order_seed: int | None  # None: the sweep's own order (stream 0)
    order: list[int]
    executor_seeds: list[int]
    curator_seed: int


@dataclass
class SweepPlan:
    sweep_id: str
    spec_name: str
    spec_hash: str
    split: str
    games: list[dict[str, Any]]  # GameRef.to_dict(), in play order
    games_hash: str
    executor_settings_hash: str | None
    seed: int
    created: float
    twinrun_version: str
    arms: list[ArmPlan] = field(default_factory=list)
    executor: str | None = None  # the executor's name: what a comparison across executors tells sweeps apart by
    schema_version: int = SWEEP_SCHEMA_VERSION
    streams: int | None = None  # replicate streams per arm; None: a manifest written before streams (one stream)
    stream_plans: list[StreamPlan] = field(default_factory=list)
    # the one dtype every checkpoint is evaluated at (sweep.curator_dtype, resolved); None: a manifest written
    # before it was stated (each checkpoint at its config's dtype)
    curator_dtype: str | None = None
    # how the checkpoints' curators generate (sweep.curator_server): None in the sweep's process (transformers),
    # "vllm" or "endpoints" on servers (another sampler: DIVERGENCES D10); a folder resumes only the same way
    curator_server: str | None = None
    # sweep --until-decided (issue 41): the looks planned, each look taken (streams, levels, verdicts) and why it
    # stopped; None for a fixed sweep. Written by twinrun.core.sweeps.until_decided
    sequential: dict[str, Any] | None = None
    # games left out of the split before the game list was drawn: game id -> why (envs.alfworld.EXCLUDED_GAMES);
    # None: a manifest planned before exclusions existed (nothing left out; its list may hold such a game)
    excluded_games: dict[str, str] | None = None

    @property
    def game_ids(self) -> list[str]:
        return [g["game_id"] for g in self.games]

    def play_order(self, replicate: int) -> list[int]:
        """Indices into the game list in the order stream `replicate` plays them (the list's own order for a
        stream the manifest has no plan for: stream 0, and the replicate arms of a manifest older than streams)."""
        for sp in self.stream_plans:
            if sp.stream == replicate:
                return list(sp.order)
        return list(range(len(self.games)))

    def arm(self, name: str) -> ArmPlan:
        for a in self.arms:
            if a.arm == name:
                return a
        raise SweepError(f"arm: {name!r} is not in sweep {self.sweep_id} (fix: one of {[a.arm for a in self.arms]})")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["arms"] = [asdict(a) for a in self.arms]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SweepPlan:
        d = dict(d)
        arms = [ArmPlan(**a) for a in d.pop("arms", [])]
        streams = [StreamPlan(**sp) for sp in d.pop("stream_plans", None) or []]
        return cls(**d, arms=arms, stream_plans=streams)


def load_plan(out_dir: str | Path) -> SweepPlan | None:
    p = Path(out_dir) / MANIFEST
    if not p.exists():
        return None
    try:
        return SweepPlan.from_dict(json.loads(p.read_text(encoding="utf-8")))
    except (json.JSONDecodeError, TypeError) as e:
        raise SweepError(f"{p}: not a sweep manifest ({e}; fix: use a new --out folder)") from None


def select_games(games: Sequence[Any], n: int | None, seed: int) -> list[Any]:
    """The sweep's game list: a fixed, seeded, type-stratified subset of `n` games (all when n is None), in a
    seeded play order. Stratified: each task type gets its share of n by largest remainder (at least one when
    n allows), drawn with a seed of its own, so the subset is the same in every process."""
    from twinrun.core.curation import stable_int

    by_type: dict[str, list[Any]] = {}
    for g in sorted(games, key=lambda g: g.game_id):
        by_type.setdefault(g.task_type, []).append(g)
    total = sum(len(v) for v in by_type.values())
    if n is None or n >= total:
        chosen = [g for v in by_type.values() for g in v]
    else:
        types = sorted(by_type)
        quota = {t: n * len(by_type[t]) / total for t in types}
        take = {t: int(quota[t]) for t in types}
        for t in sorted(types, key=lambda t: (-(quota[t] - take[t]), t))[: n - sum(take.values())]:
            take[t] += 1
        chosen = []
        for t in types:
            rng = random.Random(stable_int("sweep-games", seed, t))
            chosen.extend(rng.sample(by_type[t], take[t]))
    order = random.Random(stable_int("sweep-order", seed, len(chosen)))
    chosen = sorted(chosen, key=lambda g: g.game_id)
    order.shuffle(chosen)
    return chosen


def sweep_group_id(game_id: str) -> str:
    """The task-group id a sweep plays a game under: the same in every arm, so the executor's seed of a game is
    shared by the arms of one stream (common random numbers)."""
    return f"sweep:{game_id}"


def executor_seed(seed: int, game_id: str, stream: int) -> int:
    """The executor's sampling seed for `game_id` in stream `stream` (the curation session's seed at position 1,
    rollout index = stream): stream 0's is the seed a one-stream sweep always used."""
    from twinrun.core.envs.task_groups import rollout_episode_seed

    return rollout_episode_seed(seed, sweep_group_id(game_id), stream, 1)


def curator_seed(seed: int, stream: int) -> int:
    """The checkpoint curator's sampling seed in stream `stream` (a generation's seed is derived from it and the
    curator input: :class:`twinrun.models.curator_policy.HFCuratorPolicy`)."""
    return seed * 1000 + stream


def stream_plan(seed: int, game_ids: Sequence[str], stream: int) -> StreamPlan:
    """Stream 0 plays the sweep's order; stream r > 0 a permutation of the same games seeded by (sweep seed,
    game list, r), so each stream's early games (those its first skills are written from) differ."""
    from twinrun.core.curation import stable_int

    order = list(range(len(game_ids)))
    order_seed = None
    if stream > 0:
        order_seed = stable_int("sweep-stream-order", seed, games_hash(game_ids), stream)
        random.Random(order_seed).shuffle(order)
    return StreamPlan(stream=stream, order_seed=order_seed, order=order,
                      executor_seeds=[executor_seed(seed, g, stream) for g in game_ids],
                      curator_seed=curator_seed(seed, stream))


def check_streams(out_dir: str | Path, streams: int) -> SweepPlan | None:
    """Refuse (one line, before anything is written) a sweep folder planned with another number of streams; the
    folder's manifest (None when there is none yet)."""
    if streams < 1:
        raise SweepError(f"--streams: {streams} (fix: 1 or more streams per arm)")
    existing = load_plan(out_dir)
    if existing is None:
        return None
    planned = 1 if existing.streams is None else existing.streams
    if planned != streams:
        raise SweepError(
            f"--streams: {streams}, but {str(Path(out_dir))!r} holds sweep {existing.sweep_id} planned with "
            f"streams={planned} (sweep.json) (fix: --streams {planned} (or sweep.streams: {planned}) to resume "
            "it, or a new --out folder)"
        )
    return existing


def on_gpu(device: str | None, gpus: Sequence[int] | None = None) -> bool:
    return bool(gpus) or (device is not None and not str(device).startswith("cpu"))


def eval_dtype(spec: Any, *, gpu: bool) -> str:
    """The dtype every checkpoint of the sweep is loaded at, by its shown name (bf16, fp32, fp16: core.spec.dtypes):
    ``sweep.curator_dtype`` when stated, else the spec's compute dtype (curator.precision) on a GPU (and on launched
    vLLM servers) and fp32 on CPU (bf16 matmuls on CPU are slow, and without AVX-512 do not run at all:
    checkpoint_dtype.py)."""
    from twinrun.core.spec.dtypes import dtype_name

    stated = spec.sweep.curator_dtype
    if stated:
        return dtype_name(stated)
    gpu = gpu or spec.sweep.curator_server == "vllm"  # a launched vLLM server runs on a GPU, whatever --device says
    return dtype_name(spec.curator.precision) if gpu else "fp32"


def eval_dtype_source(spec: Any, *, gpu: bool) -> str:
    """Where :func:`eval_dtype` took the dtype from, in a few words (what `twinrun plan` shows beside it)."""
    if spec.sweep.curator_dtype:
        return "sweep.curator_dtype"
    if gpu or spec.sweep.curator_server == "vllm":
        return "curator.precision, on a GPU"
    from twinrun.core.spec.dtypes import dtype_name

    return f"the CPU default; on a GPU curator.precision's {dtype_name(spec.curator.precision)}"


def check_curator_dtype(out_dir: str | Path, dtype: str) -> None:
    """Refuse (one line, before anything is written) a sweep folder planned at another evaluation dtype: its
    checkpoints would be measured at two precisions. Either spelling of a dtype is the same dtype (a folder written
    before the short names recorded float32)."""
    from twinrun.core.spec.dtypes import dtype_name

    existing = load_plan(out_dir)
    if existing is None or existing.curator_dtype is None or dtype_name(existing.curator_dtype) == dtype_name(dtype):
        return
    was = dtype_name(existing.curator_dtype)
    raise SweepError(
        f"sweep.curator_dtype: {dtype_name(dtype)}, but {str(Path(out_dir))!r} holds sweep {existing.sweep_id} "
        f"evaluated at {was} (sweep.json) (fix: --set sweep.curator_dtype={was} to resume it, or a new --out folder)"
    )


def check_curator_server(out_dir: str | Path, mode: str | None) -> None:
    """Refuse (one line, before anything is written) a sweep folder whose curators generated the other way (in
    this process vs on servers): its checkpoints would be sampled by two samplers (DIVERGENCES D10). Launched
    servers and the user's endpoints are both served: either resumes the other."""
    existing = load_plan(out_dir)
    if existing is None or bool(existing.curator_server) == bool(mode):
        return
    was = f"served ({existing.curator_server})" if existing.curator_server else "generated in process"
    fix = f"--set sweep.curator_server={existing.curator_server}" if existing.curator_server else \
        "--set sweep.curator_server=null"
    raise SweepError(f"sweep.curator_server: {mode}, but {str(Path(out_dir))!r} holds sweep {existing.sweep_id} whose "
                     f"curators {'were ' if existing.curator_server else ''}{was} (sweep.json) (fix: {fix} to resume "
                     "it, or a new --out folder)")


def discover_checkpoints(run_dir: str | Path) -> list[tuple[int, Path]]:
    """``checkpoints/step-NNNNNN`` folders holding an HF model (config.json), by step. Hidden ``.step-*`` temp
    folders (a checkpoint being written) are not checkpoints."""
    root = RunPaths(Path(run_dir)).checkpoints
    out = []
    for p in sorted(root.glob("step-*")) if root.is_dir() else []:
        try:
            step = int(p.name.split("-", 1)[1])
        except ValueError:
            continue
        if (p / "config.json").is_file():
            out.append((step, p))
    return sorted(out)


def checkpoint_hash(path: str | Path) -> str:
    """sha256[:16] over the checkpoint folder's files (relative names and bytes, sorted): the content hash that
    every eval row carries, so a row can never be attributed to a checkpoint that was silently replaced."""
    root = Path(path)
    h = hashlib.sha256()
    for f in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(str(f.relative_to(root)).encode() + b"\0")
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        h.update(b"\0")
    return h.hexdigest()[:16]


def checkpoint_fingerprint(path: str | Path) -> str:
    """sha256[:16] of the checkpoint's file names, sizes and mtimes: cheap; a change means re-hash the content."""
    root = Path(path)
    h = hashlib.sha256()
    for f in sorted(p for p in root.rglob("*") if p.is_file()):
        st = f.stat()
        h.update(f"{f.relative_to(root)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


def _run_identity(run_dir: Path) -> tuple[str | None, str | None, int | None]:
    """(backend, spec hash, seed) of a training run, from its metrics.jsonl provenance (both backends record the
    spec's seed there) or else its spec.yaml."""
    paths = RunPaths(run_dir)
    backend = spec_hash = seed = None
    for row in read_jsonl(paths.metrics):
        prov = row.get("provenance") or {}
        backend = row.get("backend") or prov.get("backend")
        spec_hash, seed = prov.get("spec_hash"), prov.get("seed")
        break
    if (spec_hash is None or seed is None) and paths.spec.exists():
        from twinrun.core.spec import load_spec

        try:
            run_spec = load_spec(paths.spec)
        except TwinrunError:
            run_spec = None
        if run_spec is not None:
            spec_hash = spec_hash or run_spec.spec_hash()
            seed = run_spec.seed if seed is None else seed
    return backend, spec_hash, seed


def _recorded_start(run_dir: Path) -> str | None:
    """The start as the run's resolved_config.json records it: TRL's ``twinrun_curator_model`` (a local folder by its
    name, or a hub id), verl's ``actor_rollout_ref.model.path`` override (an absolute folder, or a hub id)."""
    try:
        data = json.loads(RunPaths(run_dir).resolved_config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    name = data.get("twinrun_curator_model") or (data.get("overrides") or {}).get("actor_rollout_ref.model.path")
    return name if isinstance(name, str) and name else None


def run_start(run_dir: Path) -> str | None:
    """The model a training run started from, by name (a folder's name, e.g. the warm start
    ``tiny-qwen3-warm-<key>``, or a hub id); None where the folder records neither. A warm start rebuilt under the
    same key on another machine keeps its name: :func:`start_weights_hash` tells such starts apart."""
    name = _recorded_start(run_dir)
    if name is None:
        return None
    return Path(name).name if Path(name).is_absolute() else name


def start_weights_hash(run_dir: Path, roots: Sequence[str | Path] = ()) -> str | None:
    """sha256[:16] over the run's start's ``*.safetensors`` files (names and bytes, sorted), where the start is a
    local folder here: verl's absolute path, or a folder of that name under one of ``roots`` (the cache the warm
    start was built in; TRL records the name only). None: a hub id, no such folder, or no safetensors in it. Why
    the weights and not the name: a warm start rebuilt on another machine has the same name and other weights."""
    name = _recorded_start(run_dir)
    if name is None:
        return None
    folders = [Path(name)] if Path(name).is_absolute() else [Path(r) / name for r in roots]
    folder = next((f for f in folders if f.is_dir()), None)
    files = sorted(folder.glob("*.safetensors")) if folder is not None else []
    if not files:
        return None
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode() + b"\0")
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        h.update(b"\0")
    return h.hexdigest()[:16]


def executor_name(spec: Any) -> str:
    """The executor a sweep plays with, by name: executor.model (``sweep --executor`` sets it), else its kind."""
    return str(spec.executor.model or spec.executor.kind)


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in text).strip("-")[:40] or "executor"


def _check_run_shape(run_dir: Path, spec: Any) -> None:
    """The sweep evaluates in its spec's context shape: a run trained in another shape is refused."""
    paths = RunPaths(run_dir)
    if not paths.spec.exists():
        return
    import yaml

    from twinrun.core.spec import CuratorSpec

    try:  # only the curator section is read: the run's prompt files need not resolve from here
        cur = (yaml.safe_load(paths.spec.read_text()) or {}).get("curator") or {}
    except (yaml.YAMLError, AttributeError):
        return
    fields = CuratorSpec.model_fields
    context = cur.get("context", fields["context"].default)
    history = int(cur.get("history", fields["history"].default) or 0)
    want = spec.curator
    if (context, history) != (want.context, want.history):
        raise SweepError(
            f"RUN_DIR: {str(run_dir)!r} trained with curator.context={context}, history={history}; the sweep's "
            f"spec says {want.context}, history={want.history} (fix: --set curator.context={context} "
            f"curator.history={history}, so the checkpoint is evaluated in the shape it trained in)"
        )


def parse_run_dirs(run_dirs: Sequence[str | Path]) -> dict[str, Path]:
    """``NAME=PATH`` or ``PATH`` (name: the folder's name) -> {name: path}; names are unique."""
    out: dict[str, Path] = {}
    for item in run_dirs:
        s = str(item)
        name, path = s.split("=", 1) if "=" in s and not Path(s).exists() else (None, s)
        p = Path(path)
        if not p.is_dir():
            raise SweepError(f"RUN_DIR: {path!r} is not a folder (fix: a training run directory, or NAME=PATH)")
        name = name or p.resolve().name
        if "/" in name or "#" in name or "@" in name or not name:
            raise SweepError(f"RUN_DIR: run name {name!r} may not contain '/', '@' or '#' (fix: NAME=PATH)")
        if name == BASELINE:
            raise SweepError(f"RUN_DIR: a run may not be named {BASELINE!r} (fix: NAME=PATH with another name)")
        if name in out:
            raise SweepError(f"RUN_DIR: two runs are named {name!r} (fix: name them, e.g. trl={path})")
        out[name] = p
    return out


def arm_name(run: str, step: int, replicate: int = 0) -> str:
    base = f"{run}@{step}"
    return base if replicate == 0 else f"{base}#r{replicate}"


def plan_sweep(spec: Any, run_dirs: Mapping[str, Path], out_dir: str | Path, *, games: Sequence[Any],
               split: str, executor_settings_hash: str | None, streams: int = 1,
               curator_dtype: str | None = None, curator_server: str | None = None,
               excluded_games: Mapping[str, str] | None = None,
               start_roots: Sequence[str | Path] = ()) -> SweepPlan:
    """Create the manifest, or extend an existing one with new arms (same spec, games, number of streams and
    evaluation dtype, else refused before anything is written).

    streams: replicate streams per arm; every checkpoint arm and the baseline gets replicates 0..streams-1;
    curator_dtype: the one dtype every checkpoint is loaded at (:func:`eval_dtype`); curator_server: how the
    curators generate (sweep.curator_server; None: in process); excluded_games: games left out of the split
    before `games` was drawn, with why (recorded in a new manifest; see sweep.split_exclusions); start_roots: where
    a run's start recorded by name only is looked for to hash its weights (the warm-start cache)."""
    out = Path(out_dir)
    existing = check_streams(out, streams)
    if curator_dtype is not None:
        check_curator_dtype(out, curator_dtype)
    check_curator_server(out, curator_server)
    game_dicts = [g.to_dict() for g in games]
    ids = [g["game_id"] for g in game_dicts]
    if existing is not None:
        if existing.games_hash != games_hash(ids):
            raise SweepError(
                f"--out: {str(out)!r} holds sweep {existing.sweep_id} on another game list "
                f"({existing.games_hash} vs {games_hash(ids)}); arms of different game lists cannot be paired "
                "(fix: a new --out folder, or the same split/eval_games/seed)"
            )
        if existing.spec_hash != spec.spec_hash():
            raise SweepError(
                f"--out: {str(out)!r} holds sweep {existing.sweep_id} of spec {existing.spec_hash}, not "
                f"{spec.spec_hash()} (fix: a new --out folder, or the spec that sweep used)"
            )
        plan = existing
    else:
        plan = SweepPlan(
            sweep_id=f"{spec.name}-{_slug(executor_name(spec))}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}",
            spec_name=spec.name, spec_hash=spec.spec_hash(), split=split, games=game_dicts, games_hash=games_hash(ids),
            executor_settings_hash=executor_settings_hash, seed=spec.seed, created=time.time(),
            executor=executor_name(spec),
            twinrun_version=twinrun_version(),
            streams=streams, stream_plans=[stream_plan(spec.seed, ids, r) for r in range(streams)],
            curator_dtype=curator_dtype, curator_server=curator_server,
            excluded_games=dict(excluded_games or {}),
        )
    have = {a.arm: a for a in plan.arms}

    def add(a: ArmPlan) -> None:
        old = have.get(a.arm)
        if old is None:
            plan.arms.append(a)
            have[a.arm] = a
        elif old.checkpoint_hash != a.checkpoint_hash:
            raise SweepError(
                f"arm {a.arm!r}: checkpoint {a.checkpoint_path} changed since this sweep evaluated it "
                f"({old.checkpoint_hash} -> {a.checkpoint_hash}) (fix: a new --out folder for the new weights)"
            )

    for r in range(streams):
        add(ArmPlan(arm=BASELINE if r == 0 else f"{BASELINE}#r{r}", role="baseline", replicate=r))
    for run, run_dir in run_dirs.items():
        ckpts = discover_checkpoints(run_dir)
        if not ckpts:
            raise SweepError(
                f"RUN_DIR: {str(run_dir)!r} has no checkpoints/step-NNNNNN with config.json (fix: train first, or "
                "point at the run folder that holds checkpoints/)"
            )
        backend, run_spec, run_seed = _run_identity(run_dir)
        start = run_start(Path(run_dir))
        start_hash = start_weights_hash(Path(run_dir), start_roots)
        _check_run_shape(run_dir, spec)
        for step, path in ckpts:
            known = have.get(arm_name(run, step))
            stat = checkpoint_fingerprint(path)
            # hashing an 8B checkpoint takes a minute: reuse the recorded hash while names, sizes and mtimes match
            chash = known.checkpoint_hash if known and known.checkpoint_stat == stat else checkpoint_hash(path)
            for r in range(streams):
                add(ArmPlan(arm=arm_name(run, step, r), role="checkpoint", replicate=r, run=run,
                            run_dir=str(Path(run_dir).resolve()), backend=backend, run_spec_hash=run_spec, run_seed=run_seed,
                            run_start=start, run_start_hash=start_hash,
                            checkpoint_step=step, checkpoint_path=str(path.resolve()), checkpoint_hash=chash,
                            checkpoint_stat=stat))
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / MANIFEST, plan.to_dict())
    return plan


def record_placement(out_dir: str | Path, plan: SweepPlan, placed: Mapping[str, Mapping[str, Any]]) -> SweepPlan:
    """Write where each arm's curator runs into the manifest (arm -> {device, gpus, wave, host}), atomically;
    the arms not named keep what they had. Returns the updated plan."""
    for k, a in enumerate(plan.arms):
        if a.arm in placed:
            plan.arms[k] = replace(a, **{f: placed[a.arm].get(f) for f in ("device", "gpus", "wave", "host")})
    atomic_write_json(Path(out_dir) / MANIFEST, plan.to_dict())
    return plan
