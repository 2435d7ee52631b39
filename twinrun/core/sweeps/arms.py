"""One sweep arm: its rows (:class:`EvalRecord`), the runtime it plays in, playing it game by game with resume
(:func:`run_arm`), and the counts a caller reads back. Below both the local sweep (:mod:`twinrun.core.sweeps.sweep`)
and the Ray fan-out (:mod:`twinrun.core.sweeps.ray_tasks`), which each import it."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from twinrun.core.errors import CheckpointUnreadable, EndpointUnavailable, InfrastructureError
from twinrun.core.records import (
    EpisodeRecord,
    JsonlWriter,
    Provenance,
    provenance,
    read_jsonl,
)
from twinrun.core.sweeps.plan import (
    ARMS_DIR,
    ArmPlan,
    SweepError,
    SweepPlan,
    curator_seed,
    sweep_group_id,
)

CuratorPolicy = Callable[[str], str]


# ------------------------------------------------------------------------------------------------------------
# Records


class CuratorOp(BaseModel):
    """One curator operation applied after a game (replayed on resume to rebuild the repo exactly)."""

    model_config = ConfigDict(extra="forbid")
    function: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    ok: bool
    error: str | None = None


class EvalRecord(EpisodeRecord):
    """One game of one sweep arm (`arms/<arm>.jsonl`). The game was played with the repo the arm's curator had
    built from the games before it (streaming curation); `curator_ops` are the ops its curator applied after
    seeing this game, in order."""

    kind: Literal["eval"] = "eval"  # type: ignore[assignment]
    sweep_id: str
    arm: str
    role: Literal["baseline", "checkpoint"]
    run: str | None = None  # the curve this arm belongs to (run name); None for baseline arms
    checkpoint_step: int | None = None
    replicate: int = 0
    game_index: int  # 0-based index in the sweep's game list (the pairing key); `position`: where the stream played it
    n_games: int
    games_hash: str
    repo_skills: int = 0  # skills in the repo while this game was played
    repo_chars: int = 0  # size of the repo text while this game was played
    curator_calls: int = 0  # curator generations after this game (0 for the baseline)
    curator_ops: list[CuratorOp] = Field(default_factory=list)
    curator_error: str | None = None  # the curator turn could not be generated (infrastructure): no ops applied
    run_spec_hash: str | None = None  # the spec the run was trained with (provenance.spec_hash: the sweep's)
    run_seed: int | None = None  # the seed the run was trained with (provenance.seed: the sweep's)
    executor: str | None = None  # the sweep's executor by name (`sweep --executor`, or executor.model / kind)
    curator_dtype: str | None = None  # the dtype the checkpoint's curator was evaluated at (sweep.json; None: baseline)
    # curator.history > 0 (per_position): this game's curator input and turn text, the window of later games
    # (recorded so a resumed arm restores its window)
    curator_input: str | None = None
    curator_turn: str | None = None
    provenance: Provenance


# ------------------------------------------------------------------------------------------------------------
# Curator policies


def no_ops_policy_factory(arm: ArmPlan, spec: Any) -> CuratorPolicy:
    """A curator that never writes a skill (its turn has no tool call). For plumbing tests and a 'curator
    switched off' control; it is not a checkpoint's behaviour."""

    def policy(curator_input: str) -> str:
        return "(no operations)"

    return policy


# ------------------------------------------------------------------------------------------------------------
# Running one arm


@dataclass
class ArmOutcome:
    arm: str
    rows: int
    resumed_from: int
    unmeasured: int
    successes: int
    wall_s: float
    attempts: int = 1  # Ray attempts at the arm (more than 1: its node or worker was lost and it resumed elsewhere)
    stopped: str | None = None  # why the arm stopped before its last game (its curator server is gone): resumable
    # why its remaining games were written unmeasured without being played (its checkpoint could not be loaded)
    unmeasured_why: str | None = None


def build_runtime(spec: Any, *, workers: int | None = None, environ: Mapping[str, str] | None = None,
                  executor: Any = None, prov: Provenance | None = None) -> Any:
    """Core's curation runtime for sweeps: spec executor, env pool, curator prompts, one game per session, no
    judge (sweeps measure task success only)."""
    from twinrun.core.rewards.correctness import correctness_judge_for
    from twinrun.core.curation import CurationRuntime, CuratorPrompts
    from twinrun.core.envs import make_pool
    from twinrun.core.executors import make_executor
    from twinrun.core.skills.repository import SkillRepo

    env = spec.environment
    executor = executor or make_executor(spec, environ=environ)
    pool = make_pool(env.name, env.workers if workers is None else workers, expert=bool(executor.policy.needs_expert))
    prompts = CuratorPrompts.from_files(spec.prompt_path("curator_system"), spec.prompt_path("curator_input"))
    return CurationRuntime(
        env_name=env.name, pool=pool, executor=executor, curator_prompts=prompts, reward=spec.reward,
        new_repo=lambda: SkillRepo.for_experiment(spec), top_k=spec.retrieval.top_k, group_size=1, judge=None,
        seed=spec.seed, provenance=prov, correctness_judge=correctness_judge_for(spec, spec.curation.sweep, environ=environ),
    )


def _completed_rows(path: Path, plan: SweepPlan, arm: ArmPlan, order: Sequence[int]) -> list[dict[str, Any]]:
    """The arm file's complete rows; row k must be game ``order[k]`` of the stream's play order."""
    rows = list(read_jsonl(path))
    for k, row in enumerate(rows):
        where = f"{path}:{k + 1}"
        if row.get("sweep_id") != plan.sweep_id or row.get("arm") != arm.arm:
            raise SweepError(f"{where}: row of sweep {row.get('sweep_id')!r} arm {row.get('arm')!r} in arm file "
                             f"{arm.arm!r} of sweep {plan.sweep_id} (fix: do not mix sweeps in one --out folder)")
        i = order[k] if k < len(order) else None
        if i is None or row.get("game_index") != i or row.get("game_id") != plan.games[i]["game_id"]:
            want = "no game" if i is None else f"game {i} ({plan.games[i]['game_id']})"
            raise SweepError(f"{where}: game {row.get('game_index')} where {want} was expected at position {k + 1} "
                             f"of stream {arm.replicate} (fix: the arm file was edited; remove it to replay the arm)")
    return rows


def _replay(repo: Any, rows: Sequence[Mapping[str, Any]], arm: str) -> None:
    """Rebuild the repo from recorded ops: each op that succeeded is applied again and must succeed again."""
    for row in rows:
        for op in row.get("curator_ops") or []:
            if not op.get("ok"):
                continue  # an op that failed changed nothing (ops are atomic)
            res = repo.apply(op["function"], op.get("arguments") or {})
            if not res.ok:
                raise SweepError(
                    f"arm {arm!r} game {row['game_index']}: replaying {op['function']} failed ({res.error}) "
                    "(fix: the arm file does not match this twinrun's skill repo; remove it to replay the arm)"
                )


class ArmStream:
    """One arm being played: its file, its stream's order, the rows it already has, its repository (rebuilt from
    them) and its curator history window. :func:`run_arm` plays one; :func:`twinrun.core.sweeps.lockstep.run_streams`
    plays a checkpoint's streams side by side, one game of each at a time."""

    def __init__(self, plan: SweepPlan, arm_name_: str, spec: Any, out_dir: str | Path, runtime: Any):
        from twinrun.core.curation.context_shape import HistoryTurn

        self.plan, self.spec, self.runtime = plan, spec, runtime
        self.arm = arm = plan.arm(arm_name_)
        self.path = Path(out_dir) / ARMS_DIR / f"{arm.arm}.jsonl"
        self.order = plan.play_order(arm.replicate)  # the arm's stream: its own order of the sweep's games
        self.done = _completed_rows(self.path, plan, arm, self.order)
        self.repo = runtime.new_repo()
        _replay(self.repo, self.done, arm.arm)
        self.n = len(plan.games)
        self.prov = provenance(spec_hash=plan.spec_hash, run_id=arm.run, backend=arm.backend,
                               checkpoint=arm.checkpoint_path, checkpoint_hash=arm.checkpoint_hash, seed=plan.seed,
                               executor_settings_hash=plan.executor_settings_hash)
        self.successes = sum(r["outcome"] == "success" for r in self.done)
        self.unmeasured = sum(r["outcome"] == "unmeasured" for r in self.done)
        self.window = eval_history(spec)  # the shape the run trained in: per_position with its history window
        self.history = [HistoryTurn(r["curator_input"], r["curator_turn"]) for r in self.done
                        if r.get("curator_input") and r.get("curator_turn") is not None]
        self.curator_seed = next((sp.curator_seed for sp in plan.stream_plans if sp.stream == arm.replicate),
                                 curator_seed(plan.seed, arm.replicate))
        self.t0 = time.perf_counter()
        self.stopped: str | None = None  # the curator's server went away: the rest of the arm is unmeasured
        # per game in progress: the session, the repo's size before it, the curator input
        self._game: tuple[Any, int, int, str] | None = None

    @property
    def next_k(self) -> int:
        """Where the stream stands: the position (0-based) of its next game."""
        return len(self.done)

    def session(self, k: int) -> Any:
        """Game k of the stream's order, on this arm's repository (not started)."""
        from twinrun.core.curation import TaskGroup
        from twinrun.core.envs import GameRef

        i = self.order[k]  # the game's index in the sweep's list (the pairing key); k: where this stream plays it
        game = GameRef.from_dict(self.plan.games[i])
        # same group id in every arm and rollout index = stream: the executor's seed for this game is shared by the
        # arms of a stream (common random numbers) and differs between streams (executor_seed)
        session = self.runtime.session(TaskGroup(sweep_group_id(game.game_id), game.task_type, (game,)),
                                       self.arm.replicate)
        session.repo = self.repo
        self._game = (session, len(self.repo), len(self.repo.text()), "")
        return session

    def started(self, curator_input: str) -> None:
        assert self._game is not None
        self._game = (*self._game[:3], curator_input)

    @property
    def curator_input(self) -> str:
        assert self._game is not None
        return self._game[3]

    def request(self) -> tuple[str, list[Any], int]:
        """What the curator is asked at this game: (curator input, history window, the stream's curator seed)."""
        from twinrun.core.curation.context_shape import history_window

        return self.curator_input, history_window(self.history, self.window) if self.window else [], self.curator_seed

    def finish(self, k: int, text: str | None, curator_error: str | None, writer: Any,
               before_write: Callable[[str, int], None] | None = None) -> EvalRecord:
        """Apply the curator's turn (None: no turn, e.g. the baseline or an infrastructure error), finish the
        game, append its row (durably) and advance the stream."""
        from twinrun.core.curation.context_shape import HistoryTurn
        from twinrun.core.curation.toolcalls import parse_curator_turn

        assert self._game is not None
        session, size, chars, curator_input = self._game
        arm, plan = self.arm, self.plan
        calls = 1 if arm.role == "checkpoint" and (text is not None or curator_error is not None) else 0
        ops: list[CuratorOp] = []
        if text is not None:
            turn = parse_curator_turn(text)
            if self.window:
                self.history.append(HistoryTurn(curator_input, text))
            if turn is not None:
                session.submit(turn)
                for op, res in zip(turn.operations, session.last_op_results):
                    args = op.arguments if isinstance(op.arguments, dict) else {}
                    ops.append(CuratorOp(function=str(op.function), arguments=_jsonable(args), ok=res.ok,
                                         error=res.error))
        result = session.finish()
        episode = result.positions[0].episode.record
        fields = episode.model_dump(exclude={"kind", "schema_version", "position"})
        i = self.order[k]
        row = EvalRecord(
            **fields, position=k + 1, sweep_id=plan.sweep_id, arm=arm.arm, role=arm.role, run=arm.run,
            checkpoint_step=arm.checkpoint_step, replicate=arm.replicate, game_index=i, n_games=self.n,
            games_hash=plan.games_hash, repo_skills=size, repo_chars=chars, curator_calls=calls,
            curator_ops=ops, curator_error=curator_error, run_spec_hash=arm.run_spec_hash, run_seed=arm.run_seed,
            executor=plan.executor, curator_dtype=plan.curator_dtype if arm.role == "checkpoint" else None,
            curator_input=curator_input if self.window and text is not None else None,
            curator_turn=text if self.window else None,
            provenance=self.prov.model_copy(update={"time": time.time()}),
        )
        if before_write is not None:
            before_write(arm.arm, i)
        writer.write(row)
        self.done.append({"outcome": row.outcome})
        self.successes += row.outcome == "success"
        self.unmeasured += row.outcome == "unmeasured"
        self._game = None
        return row

    def skip(self, k: int, why: str, writer: Any) -> EvalRecord:
        """Game k written unmeasured without being played (the checkpoint's curator cannot be loaded: no episode
        could be attributed to it); `why` is the row's unmeasured_reason."""
        from twinrun.core.envs import GameRef

        arm, plan = self.arm, self.plan
        i = self.order[k]
        game = GameRef.from_dict(plan.games[i])
        row = EvalRecord(
            game_id=game.game_id, task_type=game.task_type, outcome="unmeasured", unmeasured_reason=why,
            position=k + 1, sweep_id=plan.sweep_id, arm=arm.arm, role=arm.role, run=arm.run,
            checkpoint_step=arm.checkpoint_step, replicate=arm.replicate, game_index=i, n_games=self.n,
            games_hash=plan.games_hash, repo_skills=len(self.repo), repo_chars=len(self.repo.text()),
            run_spec_hash=arm.run_spec_hash, run_seed=arm.run_seed, executor=plan.executor,
            curator_dtype=plan.curator_dtype if arm.role == "checkpoint" else None,
            executor_settings_hash=plan.executor_settings_hash,
            provenance=self.prov.model_copy(update={"time": time.time()}),
        )
        writer.write(row)
        self.done.append({"outcome": row.outcome})
        self.unmeasured += 1
        return row

    def stop(self, k: int, why: str) -> None:
        """The curator's server is gone at game k (0-based position): game k's row is not written (its curator
        turn never came), and neither are the games after it; a rerun resumes the stream at game k."""
        self._game = None
        self.stopped = f"curator unavailable at game {k + 1} of {self.n}: {why}"

    def outcome(self, resumed_from: int) -> ArmOutcome:
        """The arm's counts; a stopped arm's unplayed games count as unmeasured (an infrastructure failure)."""
        missing = self.n - len(self.done)
        return ArmOutcome(self.arm.arm, self.n - missing if self.stopped else self.n, resumed_from,
                          self.unmeasured + (missing if self.stopped else 0), self.successes,
                          round(time.perf_counter() - self.t0, 3), stopped=self.stopped)


def call_policy(policy: CuratorPolicy, curator_input: str, history: Sequence[Any]) -> tuple[str | None, str | None]:
    """One curator turn, one at a time: (text, None), or (None, error) when generation failed (infrastructure:
    recorded on the row, no ops applied). A server that is gone (EndpointUnavailable) is raised: the arm stops."""
    try:
        return (policy(curator_input, history) if history else policy(curator_input)), None
    except (EndpointUnavailable, CheckpointUnreadable):
        raise  # the arm cannot go on: the caller stops it (server gone) or writes it unmeasured (checkpoint)
    except InfrastructureError as e:
        return None, str(e)


def run_arm(plan: SweepPlan, arm_name_: str, spec: Any, out_dir: str | Path, runtime: Any,
            policy: CuratorPolicy | None, *, on_row: Callable[[str, int], None] | None = None,
            before_write: Callable[[str, int], None] | None = None) -> ArmOutcome:
    """Play (or finish) one arm, one game and one curator call at a time: resume from its complete rows, then
    stream the remaining games.

    before_write(arm, game_index) runs before each row is appended and may raise to stop the arm (a Ray attempt
    whose arm was taken over by a newer attempt: :mod:`twinrun.core.sweeps.ray_tasks`). A curator whose server is
    gone (EndpointUnavailable) stops the arm before the game in flight is written (:meth:`ArmStream.stop`)."""
    st = ArmStream(plan, arm_name_, spec, out_dir, runtime)
    resumed = st.next_k
    with JsonlWriter(st.path) as writer:  # truncates a torn last line before appending
        for k in range(resumed, st.n):
            session = st.session(k)
            st.started(session.start())
            text, error = None, None
            if st.arm.role == "checkpoint" and policy is not None:
                curator_input, history, _ = st.request()
                try:
                    text, error = call_policy(policy, curator_input, history)
                except EndpointUnavailable as e:
                    st.stop(k, str(e))
                    break
            st.finish(k, text, error, writer, before_write)
            if on_row is not None:
                on_row(st.arm.arm, k + 1)
    return st.outcome(resumed)


def eval_history(spec: Any) -> int:
    """The history window a sweep prompts the curator with: the run's ``curator.history`` for per_position
    (evaluated in the shape it trained in); 0 for accumulated (evaluated per game; DIVERGENCES D1)."""
    c = spec.curator
    return int(c.history) if c.context == "per_position" else 0


def _jsonable(obj: Any) -> Any:
    return json.loads(json.dumps(obj, default=str))


def rows_done(out_dir: str | Path, arm: str) -> int:
    """Complete rows of an arm file (cheap: counts newline-terminated lines)."""
    p = Path(out_dir) / ARMS_DIR / f"{arm}.jsonl"
    if not p.exists():
        return 0
    with open(p, "rb") as f:
        return f.read().count(b"\n")


PolicyFactory = Callable[[ArmPlan, Any], CuratorPolicy]


class LineProgress:
    """Progress for a console that is not a terminal (a log file, CI, nohup): rich draws its bars there only when
    they stop, so a sweep of many minutes printed nothing until its end. One plain line per arm at each quarter of
    its games and at its end, with the time since the sweep began. The add_task/update subset the sweeps use."""

    def __init__(self, out: Any = None):
        import time

        self._out, self._t0, self._time = out, time.monotonic(), time.monotonic
        self._tasks: list[list[Any]] = []  # [arm, total, quarters printed]

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    @staticmethod
    def _quarter(done: int, total: int) -> int:
        return 4 * done // total if total else 4

    def add_task(self, description: str, total: int, completed: int = 0) -> int:
        self._tasks.append([description, total, self._quarter(completed, total)])
        return len(self._tasks) - 1

    def update(self, task: int, completed: int) -> None:
        import sys

        t = self._tasks[task]
        q = self._quarter(completed, t[1])
        if q > t[2]:
            t[2] = q
            print(f"sweep: {t[0]} {completed}/{t[1]} games ({self._time() - self._t0:.0f} s)",
                  file=self._out or sys.stdout, flush=True)


def _progress(enabled: bool) -> Any:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    if enabled and not Console().is_terminal:
        return LineProgress()
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    disable=not enabled, transient=False)


def _finished(out_dir: str | Path, arm: str, n: int) -> ArmOutcome:
    rows = list(read_jsonl(Path(out_dir) / ARMS_DIR / f"{arm}.jsonl"))
    return ArmOutcome(arm, n, len(rows), sum(r["outcome"] == "unmeasured" for r in rows),
                      sum(r["outcome"] == "success" for r in rows), 0.0)
