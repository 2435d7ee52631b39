"""sweep --streams: every arm (checkpoints and baseline) played as R replicate streams of the same games, each in
its own order with its own executor seeds from an empty skill repository (docs/streams.md).

Real ALFWorld games, core's curation sessions and the scripted executor (plumbing speed). Curators, named for what
they are: ``inserting_curator`` is a scripted stand-in for a checkpoint that inserts one valid skill per game (it
makes each stream's repository grow, so "from an empty repository" and the replay on resume are observable);
``no_ops_policy_factory`` writes nothing. ``SeedRecordingExecutor`` is the real scripted executor with a note of
the seed each episode was played with.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from twinrun.core.sweeps import sweep as sw
from twinrun.core.envs import GameRef
from twinrun.core.executors import Executor, make_executor
from twinrun.core.spec import load_spec
from twinrun.core.curation.toolcalls import format_curate_call

FAST = ["executor.max_turns=3"]


def checkpoint_folder(path: Path, seed: int = 0) -> Path:
    """A checkpoint-shaped folder (config.json + weight bytes), never loaded by the scripted/no-ops curators."""
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"model_type": "qwen3", "hidden_size": 16, "seed": seed}))
    (path / "model.safetensors").write_bytes(hashlib.sha256(str(seed).encode()).digest() * 64)
    return path


def inserting_curator(arm: sw.ArmPlan, spec: object) -> sw.CuratorPolicy:
    def policy(curator_input: str) -> str:
        name = "skill-" + hashlib.sha256(curator_input.encode()).hexdigest()[:8]
        content = f"---\nname: {name}\ndescription: what was learned from one game\n---\n# Workflow\n1. look around\n"
        return format_curate_call([{"function": "new_skill_insert", "arguments": {"skill_name": name,
                                                                                  "content": content}}])

    return policy


class SeedRecordingExecutor(Executor):
    """The spec's scripted executor; every episode's (game id, seed) is noted."""

    seen: list[tuple[str, int]]

    async def play(self, env, game, **kw):  # type: ignore[override]
        self.seen.append((game.game_id, kw.get("seed")))
        return await super().play(env, game, **kw)


def recording_executor(spec: object) -> SeedRecordingExecutor:
    base = make_executor(spec)
    ex = SeedRecordingExecutor(base.policy, base.prompts, base.max_turns, base.history, base.settings_hash,
                               base.include_thoughts)
    ex.seen = []
    return ex


def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def folder_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _games(n: int) -> list[GameRef]:
    return [GameRef("alfworld", f"valid_seen/pick-{i}/t", "pick", "valid_seen") for i in range(n)]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("runs") / "trl-s0"
    for step in (2, 4):
        checkpoint_folder(root / "checkpoints" / f"step-{step:06d}", seed=step)
    return root


# ------------------------------------------------------------------------------------------------------------
# The plan


def test_plan_gives_every_arm_r_streams_with_own_order_and_seeds(tmp_path: Path, smoke_spec_path: Path,
                                                                 run_dir: Path) -> None:
    spec = load_spec(smoke_spec_path)
    games = _games(8)
    plan = sw.plan_sweep(spec, {"trl": run_dir}, tmp_path / "out", games=games, split="valid_seen",
                         executor_settings_hash="x", streams=3)
    assert [a.arm for a in plan.arms] == ["baseline", "baseline#r1", "baseline#r2", "trl@2", "trl@2#r1", "trl@2#r2",
                                          "trl@4", "trl@4#r1", "trl@4#r2"]
    assert [a.replicate for a in plan.arms if a.checkpoint_step == 4] == [0, 1, 2]
    assert plan.streams == 3 and [sp.stream for sp in plan.stream_plans] == [0, 1, 2]
    ids = plan.game_ids
    orders = [plan.play_order(r) for r in range(3)]
    assert orders[0] == list(range(8)) and plan.stream_plans[0].order_seed is None  # stream 0: the sweep's order
    assert all(sorted(o) == list(range(8)) for o in orders) and len({tuple(o) for o in orders}) == 3
    for r, sp in enumerate(plan.stream_plans):
        assert sp.executor_seeds == [sw.executor_seed(spec.seed, g, r) for g in ids]
        assert sp.curator_seed == sw.curator_seed(spec.seed, r)
    assert plan.stream_plans[0].executor_seeds != plan.stream_plans[1].executor_seeds
    # the manifest holds all of it, and reads back the same
    on_disk = json.loads((tmp_path / "out" / "sweep.json").read_text())
    assert on_disk["streams"] == 3 and on_disk["stream_plans"][2]["order"] == orders[2]
    assert sw.load_plan(tmp_path / "out") == plan
    # another sweep seed: other orders; the same seed in another folder: the same orders
    again = sw.plan_sweep(spec, {"trl": run_dir}, tmp_path / "same", games=games, split="valid_seen",
                          executor_settings_hash="x", streams=3)
    assert [sp.order for sp in again.stream_plans] == orders


def test_a_folder_resumed_with_other_streams_is_refused_before_any_write(tmp_path: Path, smoke_spec_path: Path,
                                                                         run_dir: Path) -> None:
    from typer.testing import CliRunner

    from twinrun.cli import app

    spec = load_spec(smoke_spec_path)
    out = tmp_path / "out"
    sw.plan_sweep(spec, {"trl": run_dir}, out, games=_games(4), split="valid_seen", executor_settings_hash="x",
                  streams=2)
    (out / "arms").mkdir()
    (out / "arms" / "baseline.jsonl").write_text('{"half": "a row"}\n')
    before = folder_bytes(out)
    for streams in (1, 3):
        with pytest.raises(sw.SweepError, match=rf"^--streams: {streams}, but .* planned with streams=2 \(sweep.json\)"
                                                r" \(fix: --streams 2 .* or a new --out folder\)$"):
            sw.sweep(spec, {"trl": run_dir}, out, streams=streams, progress=False,
                     policy_factory=sw.no_ops_policy_factory)
        assert folder_bytes(out) == before
    res = CliRunner().invoke(app, ["sweep", f"trl={run_dir}", "--spec", str(smoke_spec_path), "--out", str(out),
                                   "--streams", "3", "--curator", "no-ops"])
    assert res.exit_code != 0 and "planned with streams=2" in str(res.exception or res.output)
    assert folder_bytes(out) == before
    # a manifest written before streams existed is one stream: it resumes with 1 and refuses 2
    legacy = tmp_path / "legacy"
    sw.plan_sweep(spec, {"trl": run_dir}, legacy, games=_games(4), split="valid_seen", executor_settings_hash="x")
    d = json.loads((legacy / "sweep.json").read_text())
    del d["streams"], d["stream_plans"]
    (legacy / "sweep.json").write_text(json.dumps(d))
    with pytest.raises(sw.SweepError, match="planned with streams=1"):
        sw.check_streams(legacy, 2)
    assert sw.check_streams(legacy, 1).streams is None


def test_replicates_is_an_alias_of_two_streams_only_when_it_names_every_arm() -> None:
    from twinrun.commands.sweep import replicates_as_streams

    assert replicates_as_streams([], ["trl", "verl"]) is None
    assert replicates_as_streams(["trl", "verl"], ["trl", "verl"]) == 2
    assert replicates_as_streams(["baseline", "trl", "verl"], ["trl", "verl"]) == 2
    for partial in (["trl"], ["trl:20,40", "verl"], ["baseline"], ["baseline:3", "trl", "verl"]):
        with pytest.raises(sw.SweepError, match=r"replays some arms only.*\(fix: --streams 2"):
            replicates_as_streams(partial, ["trl", "verl"])
    with pytest.raises(sw.SweepError, match="'dpo' is not among the RUN_DIRs"):
        replicates_as_streams(["dpo"], ["trl", "verl"])


# ------------------------------------------------------------------------------------------------------------
# Real games


@pytest.mark.slow  # two streams of four arms and a resume on real games
@pytest.mark.alfworld
def test_streams_play_their_own_order_and_seeds_from_an_empty_repo_and_resume(
        tmp_path: Path, smoke_spec_path: Path, run_dir: Path, alfworld_data: Path) -> None:
    spec = load_spec(smoke_spec_path, FAST)
    out = tmp_path / "sweep"
    ex = recording_executor(spec)
    arms = ["baseline", "baseline#r1", "trl@2", "trl@2#r1"]
    res = sw.sweep(spec, {"trl": run_dir}, out, data_root=alfworld_data, n_games=5, workers=0, streams=2,
                   policy_factory=inserting_curator, progress=False, arms=arms, executor=ex)
    assert res.streams == 2 and set(res.arms) == set(arms)
    plan = sw.load_plan(out)
    order1 = plan.play_order(1)
    assert order1 != list(range(5)) and sorted(order1) == list(range(5))
    for arm in arms:
        a = plan.arm(arm)
        rows = read_rows(out / "arms" / f"{arm}.jsonl")
        order = plan.play_order(a.replicate)
        # game_index is the game's index in the sweep's list (pairing key); position is where the stream played it
        assert [r["game_index"] for r in rows] == order and [r["position"] for r in rows] == [1, 2, 3, 4, 5]
        assert [r["game_id"] for r in rows] == [plan.game_ids[i] for i in order]
        assert {r["replicate"] for r in rows} == {a.replicate}
        if a.role == "checkpoint":  # each stream starts from an empty repository and grows its own
            assert [r["repo_skills"] for r in rows] == [0, 1, 2, 3, 4]
    # the executor played each stream's games with the stream's seeds from the manifest
    seeds = {(gid, seed) for gid, seed in ex.seen}
    for sp in plan.stream_plans:
        assert {(g, s) for g, s in zip(plan.game_ids, sp.executor_seeds)} <= seeds
    assert len(ex.seen) == 4 * 5

    # kill-and-resume per stream: the stream-1 arm keeps its first 2 rows (and a torn line); a rerun plays the
    # stream's remaining games in the stream's order, rebuilding its repo from the recorded ops
    path = out / "arms" / "trl@2#r1.jsonl"
    full = read_rows(path)
    kept = b"".join(json.dumps(r).encode() + b"\n" for r in full[:2])
    path.write_bytes(kept + b'{"kind":"eval","arm":"trl@2#r1","game_in')
    other = {arm: (out / "arms" / f"{arm}.jsonl").read_bytes() for arm in arms if arm != "trl@2#r1"}
    again = sw.sweep(spec, {"trl": run_dir}, out, data_root=alfworld_data, n_games=5, workers=0, streams=2,
                     policy_factory=inserting_curator, progress=False, arms=arms)
    assert again.arms["trl@2#r1"].resumed_from == 2
    rows = read_rows(path)
    assert path.read_bytes().startswith(kept)
    assert [r["game_index"] for r in rows] == order1 and [r["repo_skills"] for r in rows] == [0, 1, 2, 3, 4]
    assert [r["curator_ops"] for r in rows] == [r["curator_ops"] for r in full]  # the same stream, replayed
    assert {arm: (out / "arms" / f"{arm}.jsonl").read_bytes() for arm in other} == other  # finished arms untouched

    # compare reads the streams as the replicate arms of one sweep (stream r of each cell: `replicate` = r)
    from twinrun.core.compare import load_game_table

    table = load_game_table([out])
    assert sorted((a.name, a.replicate) for a in table.arms) == sorted((a, plan.arm(a).replicate) for a in arms)
    # and twinrun design reads it as a pilot: rho from the streams of each cell (baseline, trl@2)
    from twinrun.core.compare.design import pilot_from_sweep

    pilot = pilot_from_sweep(out)
    assert (pilot.streams, pilot.games, pilot.checkpoints, pilot.runs) == (2, 5, 1, 1)
    assert pilot.icc.streams == 4 and pilot.icc.df_between == 2  # 2 cells x (2 streams - 1)
    # the report of this sweep shows its streams and the correlation estimated from its per-game outcomes
    from twinrun.core.compare import CompareSettings, compare
    from twinrun.core.compare.report import write_report

    report = write_report(compare([out], "baseline", CompareSettings(n_boot=1000)), tmp_path / "report")
    text = report.read_text()
    assert "## Streams" in text and "| `trl@2` |" in text


@pytest.mark.alfworld
@pytest.mark.slow
def test_ray_fans_out_arms_times_streams_like_the_local_run(tmp_path: Path, smoke_spec_path: Path, run_dir: Path,
                                                            alfworld_data: Path) -> None:
    spec = load_spec(smoke_spec_path, FAST)
    local, ray_out = tmp_path / "local", tmp_path / "ray"
    # the built-in no-ops curator: a Ray worker imports it from twinrun (a test module's function may not import there)
    kw = dict(data_root=alfworld_data, n_games=3, workers=0, streams=2, policy_factory=sw.no_ops_policy_factory,
              progress=False)
    sw.sweep(spec, {"trl": run_dir}, local, **kw)
    res = sw.sweep(spec, {"trl": run_dir}, ray_out, ray_address="local", ray_num_cpus=2, **kw)
    assert set(res.arms) == {"baseline", "baseline#r1", "trl@2", "trl@2#r1", "trl@4", "trl@4#r1"}
    plan = sw.load_plan(ray_out)
    for arm in res.arms:
        a = plan.arm(arm)
        got = read_rows(ray_out / "arms" / f"{arm}.jsonl")
        want = read_rows(local / "arms" / f"{arm}.jsonl")
        assert [r["game_index"] for r in got] == plan.play_order(a.replicate)
        # the same stream plays the same games with the same seeds on a Ray worker as locally
        assert [(r["game_id"], r["outcome"], r["steps"]) for r in got] == \
            [(r["game_id"], r["outcome"], r["steps"]) for r in want]


def test_run_resume_refuses_a_sweep_planned_with_other_streams_before_training(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, tmp_path: Path, smoke_spec_path: Path,
        run_dir: Path) -> None:
    """`twinrun run --resume` with sweep.streams changed: one line, before any trainer starts or any file changes."""
    import sys

    from twinrun import cli
    from twinrun.backends import registry

    spec = load_spec(smoke_spec_path)
    out = tmp_path / "arm"
    sw.plan_sweep(spec, {"trl": run_dir}, out / "sweep", games=_games(4), split="valid_seen",
                  executor_settings_hash="x", streams=2)
    before = folder_bytes(out)
    monkeypatch.setattr(registry, "trainer", lambda b: pytest.fail(f"the {b} trainer was reached"))
    monkeypatch.setattr(sys, "argv", ["twinrun", "run", str(smoke_spec_path), "--out", str(out), "--resume",
                                      "--set", "sweep.streams=3"])
    with pytest.raises(SystemExit) as e:
        cli.main()
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1 and "--streams: 3, but" in err and "streams=2" in err
    assert folder_bytes(out) == before
