"""ROSE rounds under one framework, from one spec (`twinrun rose SPEC --backend trl|verl --out DIR`).

Per round r (1..``sft.rose.rounds``):
1. **data** (core, :mod:`twinrun.core.sft.rose`): the current student (round 1: ``sft.model``; later: the previous
   round's last checkpoint) plays ``student_turns`` replies on the round's training variations and the teacher
   (``sft.teacher``) continues each episode for ``teacher_turns`` replies -> ``rounds/round-NN/data.jsonl``;
   with ``--data-from RUN`` the round's data is copied from another ROSE run instead (a strict framework parity
   check: both frameworks then train on identical data every round);
2. **SFT** (the backend, the ``sft`` recipe with ``epochs_per_round`` epochs): from the previous round's weights
   and, with ``carry_optimizer`` (default), its AdamW state (moments and step counts continue; the learning-rate
   schedule restarts each round) -> ``rounds/round-NN/sft/`` (an ordinary SFT run folder: plan.json,
   metrics.jsonl, checkpoints/step-N);
3. ``rounds/round-NN/done.json`` marks the round finished (what a resumed run and ``eval-agent --run`` read).

``rose.json`` names the backend and the spec hash; ``--resume`` continues the first unfinished round (its data
collection and its training both resume). Unmeasured episodes stop the run before training (rerun with --resume
to replay them): a round never trains on a silently smaller set.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from twinrun.core.errors import InfrastructureError, TwinrunError

def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def round_dir(out: Path, r: int) -> Path:
    return out / "rounds" / f"round-{r:02d}"


def _manifest(spec: Any, backend: str, data_from: Path | None) -> dict[str, Any]:
    return {"kind": "rose_run", "backend": backend, "spec_hash": spec.spec_hash(), "rounds": spec.sft.rose.rounds,
            "data_from": str(data_from) if data_from else None}


def _guard(out: Path, want: dict[str, Any], resume: bool) -> str:
    """ROSE's folder guard (reads only; core's run lifecycle calls it before and under the lock): a new run needs
    an empty folder, a resume the same backend, spec and --data-from. The resume point is the first round without
    done.json."""
    from twinrun.core.records.lock import LOCK_NAME

    manifest = out / "rose.json"
    if not resume:
        if out.exists() and any(p.name != LOCK_NAME for p in out.iterdir()):
            raise TwinrunError(f"--out: {str(out)!r} is not empty (fix: a new folder, or --resume to continue it)")
        return "new"
    if not manifest.is_file():
        raise TwinrunError(f"--resume: {str(out)!r} holds no ROSE run (no rose.json; fix: drop --resume)")
    have = json.loads(manifest.read_text(encoding="utf-8"))
    for k in ("backend", "spec_hash", "data_from"):
        if have.get(k) != want[k]:
            raise TwinrunError(f"--resume: {manifest} was started with {k}={have.get(k)!r}, not {want[k]!r} "
                               "(fix: resume with the same spec, backend and --data-from, or a new --out)")
    return "resume"


def _round_spec(spec: Any, data: Path, model: str) -> Any:
    s = spec.model_copy(deep=True)
    s.sft.data = str(data)
    s.sft.model = model
    s.sft.epochs = spec.sft.rose.epochs_per_round
    return s


def _copy_round_data(data_from: Path, r: int, dst: Path) -> None:
    from twinrun.core.records import atomic_write_text

    src_dir = round_dir(data_from, r)
    if not (src_dir / "done.json").is_file():
        raise TwinrunError(f"--data-from: {src_dir} is not a finished round (fix: run `twinrun rose` there to round "
                           f"{r} first)")
    if not dst.exists():
        atomic_write_text(dst, (src_dir / "data.jsonl").read_text(encoding="utf-8"))


def run_rose(spec: Any, backend: str, out: str | Path, *, cache_dir: Any = None, data_from: str | Path | None = None,
             resume: bool = False, base_url: str | None = None, model: str | None = None,
             progress: Callable[[str], None] | None = None, train_kw: dict[str, Any] | None = None
             ) -> dict[str, Any]:
    """Run (or resume) every round; returns ``{"rounds": [done.json of each round], ...}``."""
    import yaml

    from twinrun.core.records import RunPaths
    from twinrun.core.records.lifecycle import run_lifecycle

    from twinrun.backends import registry

    if backend not in registry.names_with("sft"):
        raise TwinrunError(f"--backend: {backend!r} is not an SFT backend (fix: one of "
                           f"{', '.join(registry.names_with('sft'))})")
    out = Path(out)
    data_from = Path(data_from) if data_from is not None else None
    if data_from is not None and not (data_from / "rose.json").is_file():
        raise TwinrunError(f"--data-from: {str(data_from)!r} is not a ROSE run (no rose.json; fix: another ROSE "
                           "run's --out)")
    say = progress or (lambda m: None)
    want = _manifest(spec, backend, data_from)
    spec_yaml = yaml.safe_dump(json.loads(spec.canonical_json()), sort_keys=False)
    with run_lifecycle(RunPaths(out), spec_yaml=spec_yaml, backend=backend, resume=resume, log=say,
                       folder_guard=lambda: _guard(out, want, resume)) as run:
        run.begin(keep_steps=None, files={"rose.json": want})  # locked until every round is done
        finished = _rounds(spec, backend, out, registry.sft_trainer(backend), cache_dir=cache_dir,
                           data_from=data_from, base_url=base_url, model=model, say=say, train_kw=train_kw)
    return {"backend": backend, "out": str(out), "rounds": finished}


def _rounds(spec: Any, backend: str, out: Path, train: Callable[..., Any], *, cache_dir: Any,
            data_from: Path | None, base_url: str | None, model: str | None, say: Callable[[str], None],
            train_kw: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Every round from the first without done.json (data, SFT, done.json); returns each round's done.json."""
    from twinrun.backends.sft_plan import prepare_sft
    from twinrun.core.records import atomic_write_json
    from twinrun.models.tiny import resolve_model

    rose = spec.sft.rose
    collector = None if data_from is not None else _Collector(spec, base_url, model, cache_dir, say)
    student = resolve_model(spec.sft.model or spec.curator.model, cache_dir)
    optimizer_from: str | None = None
    finished = []
    try:
        for r in range(1, rose.rounds + 1):
            rd = round_dir(out, r)
            done_file = rd / "done.json"
            if done_file.is_file():
                done = json.loads(done_file.read_text(encoding="utf-8"))
                student, optimizer_from = done["checkpoint"], done["optimizer_state"]
                finished.append(done)
                say(f"round {r}: finished earlier ({done['checkpoint']})")
                continue
            rd.mkdir(parents=True, exist_ok=True)
            data = rd / "data.jsonl"
            if collector is None:
                _copy_round_data(data_from, r, data)  # type: ignore[arg-type]
                say(f"round {r}: data from {round_dir(data_from, r)}")  # type: ignore[arg-type]
            else:
                collector.collect(r, student, data)
            round_spec = _round_spec(spec, data, student)
            prepared = prepare_sft(round_spec, cache_dir=cache_dir, output_dir=str(rd / "sft" / backend))
            carried = optimizer_from if rose.carry_optimizer else None
            sft_dir = rd / "sft"
            say(f"round {r}: {backend} trains {len(prepared.dataset.examples)} episodes, "
                f"{prepared.plan.schedule.total_steps} step(s), from {student}"
                f"{' with its optimizer state' if carried else ' with a fresh optimizer'}")
            result = train(round_spec, sft_dir, resume=sft_dir.exists() and any(sft_dir.iterdir()),
                           prepared=prepared, optimizer_from=carried, **(train_kw or {}))
            if not result["checkpoints"] or not result.get("optimizer_state"):
                raise TwinrunError(f"round {r}: {backend} wrote no checkpoint (see {sft_dir})")
            done = {"round": r, "backend": backend, "checkpoint": result["checkpoints"][-1],
                    "optimizer_state": result["optimizer_state"], "optimizer_from": carried,
                    "data_sha256": _sha(data), "episodes": len(prepared.dataset.examples),
                    "trained_tokens": sum(e.trained_tokens for e in prepared.dataset.examples),
                    "steps": prepared.plan.schedule.total_steps}
            atomic_write_json(done_file, done)
            finished.append(done)
            student, optimizer_from = done["checkpoint"], done["optimizer_state"]
            say(f"round {r}: done -> {student}")
    finally:
        if collector is not None:
            collector.close()
    return finished


class _Collector:
    """The data side of every round: the training variations, one simulator, the teacher endpoint (probed once,
    before the first episode), and the student loaded from each round's starting checkpoint."""

    def __init__(self, spec: Any, base_url: str | None, model: str | None, cache_dir: Any,
                 say: Callable[[str], None]):
        from twinrun.core.envs.scienceworld import ScienceWorldCatalog, SciWorldEnv
        from twinrun.core.executors import BackgroundLoop
        from twinrun.core.sft.teacher import probe_teacher, teacher_generator

        self.spec, self.say = spec, say
        from twinrun.commands._common import teacher_endpoint

        t = spec.sft.teacher
        self.url, self.name, key = teacher_endpoint(t, base_url, model)
        say(f"probing the teacher {self.url} ({self.name}) with {', '.join(t.send) or 'no sampling parameters'}")
        probe_teacher(t, base_url=self.url, model=self.name, api_key=key)
        catalog = ScienceWorldCatalog(t.split, tasks=t.tasks)
        try:
            self.games = sorted(catalog.games(), key=lambda g: g.game_id)
        finally:
            catalog.close()
        self.loop = BackgroundLoop(name="twinrun-rose-teacher")
        self.teacher = teacher_generator(t, base_url=self.url, model=self.name, api_key=key, loop=self.loop)
        self.env = SciWorldEnv(gold_path=False)

    def collect(self, r: int, student_path: str, data: Path) -> None:
        from twinrun.core.sft.agent_eval import AgentEvalSettings, hf_generator
        from twinrun.core.sft.rose import collect_round, round_games
        from twinrun.core.sft.data import sciworld_instruction

        rose = self.spec.sft.rose
        games = round_games(self.games, rose.variations_per_round, self.spec.seed, r)
        settings = AgentEvalSettings(temperature=rose.student_temperature, top_p=rose.student_top_p,
                                     max_tokens=rose.student_max_tokens, thinking=False)
        student = hf_generator(student_path, settings)
        self.say(f"round {r}: {len(games)} variations, student {student_path} plays {rose.student_turns} replies, "
                 f"the teacher {rose.teacher_turns}")
        report = collect_round(self.env, games, data, student=student, teacher=self.teacher,
                               student_turns=rose.student_turns, teacher_turns=rose.teacher_turns, round_index=r,
                               seed=self.spec.seed, instruction=sciworld_instruction(),
                               literal=self.spec.sft.literal_copies, student_name=student_path,
                               teacher_name=self.name, progress=self.say)
        if report.unmeasured:
            raise InfrastructureError(f"round {r}: {len(report.unmeasured)} episode(s) unmeasured (first: "
                                      f"{report.unmeasured[0][:200]}); rerun with --resume to replay them before "
                                      "the round trains")

    def close(self) -> None:
        self.env.shutdown()
        self.loop.close()
