"""sweep: real ALFWorld games, core's curation sessions, the scripted executor (plumbing speed), HF checkpoints.

Curator policies used here, named for what they are:
- ``inserting_curator``: a scripted stand-in for a trained checkpoint that inserts one valid skill per game (it
  exercises op recording and the replay on resume; its skills are not learned);
- ``no_ops_policy_factory``: the built-in curator that writes nothing (plumbing);
- the real HF policy on a random tiny Qwen3 checkpoint (slow test).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from twinrun.core.sweeps import sweep as sw
from twinrun.core.compare import CompareSettings, compare
from twinrun.core.envs import GameRef
from twinrun.core.spec import load_spec
from twinrun.core.curation.toolcalls import format_curate_call

# short episodes: the sweep's plumbing, not the agent, is under test; one stream per arm (the smoke spec plays 2):
# these tests pin the one-stream layout (tests/core/sweeps/test_sweep_streams.py plays several)
FAST_EXECUTOR = ["executor.max_turns=3", "sweep.streams=1"]


def checkpoint_folder(path: Path, seed: int = 0) -> Path:
    """A checkpoint-shaped folder (config.json + weight bytes), never loaded: the scripted and no-ops curators do not
    generate, so only its discovery and content hash are exercised. The slow HF test uses a real checkpoint."""
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"model_type": "qwen3", "hidden_size": 16, "seed": seed}))
    (path / "model.safetensors").write_bytes(hashlib.sha256(str(seed).encode()).digest() * 64)
    return path


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("runs") / "trl-s0"
    for step in (2, 4):
        checkpoint_folder(root / "checkpoints" / f"step-{step:06d}", seed=step)
    (root / "checkpoints" / ".step-000006.tmp").mkdir()  # a checkpoint being written: not a checkpoint
    return root


def inserting_curator(arm: sw.ArmPlan, spec: object) -> sw.CuratorPolicy:
    """Scripted stand-in for a checkpoint: one new skill per game, named after the curator input's hash."""

    def policy(curator_input: str) -> str:
        name = "skill-" + hashlib.sha256(curator_input.encode()).hexdigest()[:8]
        content = f"---\nname: {name}\ndescription: what was learned from one game\n---\n# Workflow\n1. look around\n"
        return format_curate_call([{"function": "new_skill_insert", "arguments": {"skill_name": name,
                                                                                  "content": content}}])

    return policy


def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# ------------------------------------------------------------------------------------------------------------
# Pure parts


def _games(n_pick: int, n_look: int) -> list[GameRef]:
    return ([GameRef("alfworld", f"valid_seen/pick-{i}/t", "pick", "valid_seen") for i in range(n_pick)]
            + [GameRef("alfworld", f"valid_seen/look-{i}/t", "look", "valid_seen") for i in range(n_look)])


def test_select_games_is_stratified_seeded_and_stable() -> None:
    games = _games(30, 10)
    a = sw.select_games(games, 8, seed=0)
    assert len(a) == 8 and len({g.game_id for g in a}) == 8
    assert sum(g.task_type == "pick" for g in a) == 6  # 30/40 of 8
    assert [g.game_id for g in a] == [g.game_id for g in sw.select_games(list(reversed(games)), 8, seed=0)]
    assert [g.game_id for g in a] != [g.game_id for g in sw.select_games(games, 8, seed=1)]
    assert len(sw.select_games(games, None, seed=0)) == 40


def test_parse_replicates_and_run_names(tmp_path: Path) -> None:
    from twinrun.commands.sweep import parse_replicates

    assert parse_replicates(["baseline", "trl", "verl:20,10"]) == (1, {"trl": "all", "verl": [10, 20]})
    assert parse_replicates(["baseline:3"])[0] == 3
    (tmp_path / "a").mkdir()
    assert sw.parse_run_dirs([f"verl={tmp_path / 'a'}"]) == {"verl": tmp_path / "a"}
    with pytest.raises(sw.SweepError, match="two runs are named"):
        sw.parse_run_dirs([tmp_path / "a", tmp_path / "a"])
    with pytest.raises(sw.SweepError, match="not a folder"):
        sw.parse_run_dirs([tmp_path / "nope"])


def test_plan_refuses_another_game_list_and_replaced_weights(tmp_path: Path, smoke_spec_path: Path) -> None:
    spec = load_spec(smoke_spec_path)
    run = tmp_path / "r"
    ckpt = checkpoint_folder(run / "checkpoints" / "step-000001")
    games = _games(3, 1)
    plan = sw.plan_sweep(spec, {"r": run}, tmp_path / "out", games=games, split="valid_seen",
                         executor_settings_hash="x", streams=2)
    assert [a.arm for a in plan.arms] == ["baseline", "baseline#r1", "r@1", "r@1#r1"]
    assert plan.arm("r@1").checkpoint_hash == sw.checkpoint_hash(ckpt)
    again = sw.plan_sweep(spec, {"r": run}, tmp_path / "out", games=games, split="valid_seen", executor_settings_hash="x",
                          streams=2)
    assert again.sweep_id == plan.sweep_id  # extending/resuming keeps the sweep
    with pytest.raises(sw.SweepError, match="another game list"):
        sw.plan_sweep(spec, {"r": run}, tmp_path / "out", games=games[:3], split="valid_seen", executor_settings_hash="x",
                      streams=2)
    (ckpt / "model.safetensors").write_bytes(b"other weights")
    with pytest.raises(sw.SweepError, match="changed since this sweep evaluated it"):
        sw.plan_sweep(spec, {"r": run}, tmp_path / "out", games=games, split="valid_seen", executor_settings_hash="x",
                      streams=2)


# ------------------------------------------------------------------------------------------------------------
# Real games


@pytest.mark.alfworld
def test_sweep_rows_provenance_resume_noop_and_compare(tmp_path: Path, smoke_spec_path: Path, run_dir: Path,
                                                       alfworld_data: Path) -> None:
    spec = load_spec(smoke_spec_path, FAST_EXECUTOR)
    out = tmp_path / "sweep"
    res = sw.sweep(spec, {"trl": run_dir}, out, data_root=alfworld_data, n_games=2, workers=0,
                   policy_factory=inserting_curator, progress=False, arms=["baseline", "trl@2"])
    assert set(res.arms) == {"baseline", "trl@2"}
    plan = sw.load_plan(out)
    assert [a.arm for a in plan.arms] == ["baseline", "trl@2", "trl@4"]  # planned; trl@4 left for later
    rows = read_rows(out / "arms" / "trl@2.jsonl")
    assert [r["game_index"] for r in rows] == [0, 1]
    assert [r["game_id"] for r in rows] == plan.game_ids
    for i, r in enumerate(rows):
        sw.EvalRecord.model_validate(r)
        assert r["sweep_id"] == plan.sweep_id and r["games_hash"] == plan.games_hash and r["n_games"] == 2
        assert r["outcome"] in ("success", "failure", "unmeasured") and r["task_type"] in ("pick", "look")
        assert r["repo_skills"] == i  # streaming: game i saw the skills written after games 0..i-1
        assert [op["ok"] for op in r["curator_ops"]] == [True] and r["curator_calls"] == 1
        p = r["provenance"]
        assert p["checkpoint_hash"] == plan.arm("trl@2").checkpoint_hash and p["run_id"] == "trl"
        assert p["spec_hash"] == spec.spec_hash() and p["executor_settings_hash"] and p["twinrun_version"]
    assert rows[1]["retrieved_skills"] == [rows[0]["curator_ops"][0]["arguments"]["skill_name"]]
    base = read_rows(out / "arms" / "baseline.jsonl")
    assert all(r["role"] == "baseline" and r["repo_skills"] == 0 and r["curator_calls"] == 0 for r in base)

    before = (out / "arms" / "trl@2.jsonl").read_bytes()
    again = sw.sweep(spec, {"trl": run_dir}, out, data_root=alfworld_data, n_games=2, workers=0,
                     policy_factory=inserting_curator, progress=False, arms=["baseline", "trl@2"])
    assert again.sweep_id == res.sweep_id and (out / "arms" / "trl@2.jsonl").read_bytes() == before
    with pytest.raises(sw.SweepError, match="another game list"):
        sw.sweep(spec, {"trl": run_dir}, out, data_root=alfworld_data, n_games=3, workers=0, progress=False,
                 policy_factory=inserting_curator)

    result = compare([out], "baseline", CompareSettings(n_boot=200))
    assert [a["arm"] for a in result["arms"]] == ["trl@2"] and result["sweep_id"] == plan.sweep_id
    # the executor the sweep played is on every row and in the comparison (what --across executor groups by)
    assert plan.executor == sw.executor_name(spec) and {r["executor"] for r in rows + base} == {plan.executor}
    assert result["executor"] == plan.executor


def test_run_identity_reads_backend_and_seed_from_the_runs_records(tmp_path: Path, smoke_spec_path: Path) -> None:
    """A run's backend and training seed come from its metrics.jsonl provenance, else its spec.yaml: what compare
    groups runs by (framework x seed) and `run --seeds` relies on."""
    run = tmp_path / "verl-s123"
    run.mkdir()
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "provenance": {"backend": "verl", "seed": 123,
                                                                             "spec_hash": "abc"}}) + "\n")
    assert sw._run_identity(run) == ("verl", "abc", 123)
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "spec.yaml").write_text(smoke_spec_path.read_text())
    spec = load_spec(bare / "spec.yaml")
    assert sw._run_identity(bare) == (None, spec.spec_hash(), spec.seed)


def test_run_seeds_option_makes_one_run_per_backend_and_seed(smoke_spec_path: Path) -> None:
    from twinrun.commands.run import parse_seeds, seed_runs
    from twinrun.core.errors import TwinrunError

    assert parse_seeds("42, 123,456") == [42, 123, 456] and parse_seeds(None) == []
    for bad, msg in (("42,x", "'x' is not an integer"), ("1,1", "seed 1 is given twice")):
        with pytest.raises(TwinrunError, match=msg):
            parse_seeds(bad)
    runs = seed_runs(smoke_spec_path, [], ["trl", "verl"], [42, 7])
    assert [(n, b, s.seed) for n, b, s in runs] == [("trl-s42", "trl", 42), ("verl-s42", "verl", 42),
                                                    ("trl-s7", "trl", 7), ("verl-s7", "verl", 7)]
    assert len({s.spec_hash() for _, _, s in runs}) == 2  # the seed is part of the spec each run records
    (plain,) = seed_runs(smoke_spec_path, [], ["trl"], [])
    assert plain[:2] == ("trl", "trl")


_KILL_SCRIPT = """
import hashlib, os, sys, time
from pathlib import Path
from twinrun.core.sweeps import sweep as sw
from twinrun.core.spec import load_spec
from twinrun.core.curation.toolcalls import format_curate_call

def inserting_curator(arm, spec):  # scripted stand-in for a checkpoint (see tests/core/sweeps/test_sweep.py)
    def policy(chi):
        name = "skill-" + hashlib.sha256(chi.encode()).hexdigest()[:8]
        content = f"---\\nname: {name}\\ndescription: from one game\\n---\\n# Workflow\\n1. look\\n"
        return format_curate_call([{"function": "new_skill_insert", "arguments": {"skill_name": name, "content": content}}])
    return policy

spec = load_spec(sys.argv[1], ["executor.max_turns=3", "sweep.streams=1"])
sw.sweep(spec, {"trl": Path(sys.argv[2])}, Path(sys.argv[3]), data_root=sys.argv[4], n_games=4, workers=0,
         policy_factory=inserting_curator, progress=False, arms=["baseline", "trl@2"])
"""


@pytest.mark.alfworld
@pytest.mark.slow
def test_resume_after_sigkill_loses_and_duplicates_nothing(tmp_path: Path, smoke_spec_path: Path, run_dir: Path,
                                                           alfworld_data: Path) -> None:
    script = tmp_path / "sweep_script.py"
    script.write_text(_KILL_SCRIPT)
    out = tmp_path / "sweep"
    args = [sys.executable, str(script), str(smoke_spec_path), str(run_dir), str(out), str(alfworld_data)]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    arm_file = out / "arms" / "trl@2.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and sw.rows_done(out, "trl@2") < 1 and proc.poll() is None:
        time.sleep(0.05)
    assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
    os.kill(proc.pid, signal.SIGKILL)  # mid-arm: the baseline is done, trl@2 has 1..3 of 4 rows
    proc.wait()
    killed_at = sw.rows_done(out, "trl@2")
    assert 1 <= killed_at < 4
    before = arm_file.read_bytes()
    complete = before[: before.rfind(b"\n") + 1]
    with open(arm_file, "ab") as f:  # as if the kill had landed mid-write: a torn last line
        f.write(b'{"kind":"eval","arm":"trl@2","game_in')

    done = subprocess.run(args, capture_output=True, timeout=600)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    after = arm_file.read_bytes()
    assert after.startswith(complete)  # rows written before the kill are untouched
    rows = read_rows(arm_file)
    assert [r["game_index"] for r in rows] == [0, 1, 2, 3]  # none lost, none duplicated, in order
    # the repo was rebuilt by replaying the recorded ops: game i still sees exactly the i skills before it
    assert [r["repo_skills"] for r in rows] == [0, 1, 2, 3]
    assert len({r["curator_ops"][0]["arguments"]["skill_name"] for r in rows}) == 4
    assert [r["game_index"] for r in read_rows(out / "arms" / "baseline.jsonl")] == [0, 1, 2, 3]


@pytest.mark.alfworld
@pytest.mark.slow
def test_ray_fan_out_matches_the_local_files(tmp_path: Path, smoke_spec_path: Path, run_dir: Path,
                                            alfworld_data: Path) -> None:
    spec = load_spec(smoke_spec_path, FAST_EXECUTOR)
    out = tmp_path / "sweep"
    res = sw.sweep(spec, {"trl": run_dir}, out, data_root=alfworld_data, n_games=2, workers=0,
                   policy_factory=sw.no_ops_policy_factory, progress=False, ray_address="local", ray_num_cpus=2)
    assert set(res.arms) == {"baseline", "trl@2", "trl@4"}
    for arm in res.arms:
        rows = read_rows(out / "arms" / f"{arm}.jsonl")
        assert [r["game_index"] for r in rows] == [0, 1] and all(r["sweep_id"] == res.sweep_id for r in rows)
    # common random numbers: with no skills written, every arm replays the same executor episodes
    outcomes = {arm: [r["outcome"] for r in read_rows(out / "arms" / f"{arm}.jsonl")] for arm in res.arms}
    assert len({tuple(v) for v in outcomes.values()}) == 1


@pytest.mark.alfworld
@pytest.mark.slow
@pytest.mark.sampling
def test_hf_checkpoint_curator_generates_with_the_chat_template(tmp_path: Path, smoke_spec_path: Path,
                                                                 alfworld_data: Path) -> None:
    import shutil

    from twinrun.models import build_tiny_qwen3
    from twinrun.models.curator_policy import hf_policy_factory

    cache = tmp_path / "models"
    tiny = build_tiny_qwen3(cache)
    run = tmp_path / "verl-s0"
    shutil.copytree(tiny, run / "checkpoints" / "step-000001")
    spec = load_spec(smoke_spec_path, FAST_EXECUTOR + ["curator.max_response_tokens=24"])
    out = tmp_path / "sweep"
    res = sw.sweep(spec, {"verl": run}, out, data_root=alfworld_data, n_games=2, workers=0, progress=False,
                   policy_factory=lambda arm, s: hf_policy_factory(arm, s, cache_dir=cache))
    rows = read_rows(out / "arms" / "verl@1.jsonl")
    assert len(rows) == 2 and all(r["curator_calls"] == 1 and r["curator_error"] is None for r in rows)
    assert res.arms["verl@1"].rows == 2
    # the generation itself: a random model rarely writes a valid call, but it must run through the template
    policy = hf_policy_factory(sw.load_plan(out).arm("verl@1"), spec, cache_dir=cache)
    text = policy("# Task Context\n## Task Description\nput a mug in the sink")
    assert isinstance(text, str) and text == policy("# Task Context\n## Task Description\nput a mug in the sink")


@pytest.mark.alfworld
@pytest.mark.slow
def test_cli_sweep_then_compare_writes_the_report(tmp_path: Path, smoke_spec_path: Path, run_dir: Path,
                                                  alfworld_data: Path) -> None:
    from typer.testing import CliRunner

    from twinrun.cli import app
    from twinrun.core.records import JsonlWriter, StepMetrics, provenance

    with JsonlWriter(run_dir / "metrics.jsonl", fsync=False) as w:  # what a training run leaves next to checkpoints
        for step in (1, 2, 3, 4):
            w.write(StepMetrics(step=step, backend="trl", reward_mean=0.1 * step, reward_std=0.1, curation_rollouts=4,
                                executor_episodes=12, executor_calls=40, unmeasured_episodes=0, optimizer_updates=1,
                                provenance=provenance(backend="trl")))
    out = tmp_path / "sweep"
    runner = CliRunner()
    tb = tmp_path / "tb"
    res = runner.invoke(app, ["sweep", f"trl={run_dir}", "--spec", str(smoke_spec_path), "--out", str(out),
                              "--games", "2", "--workers", "0", "--curator", "no-ops", "--no-progress", "--streams", "1",
                              "--set", "executor.max_turns=3", "--set", "tracking.backend=tensorboard",
                              "--set", f"tracking.dir={tb}", "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    assert set(summary["arms"]) == {"baseline", "trl@2", "trl@4"}
    rep = tmp_path / "report"
    res = runner.invoke(app, ["compare", str(out), "--baseline", "baseline", "--out", str(rep), "--n-boot", "200"])
    assert res.exit_code == 0, res.output
    text = (rep / "report.md").read_text()
    assert "figures/training_dynamics.png" in text and "trl@4" in text

    # issue 18: the sweep's tracker run holds each checkpoint's success rate and paired lift (counted here from
    # the arm files), and compare added its verdict table, lift table and figures to that run
    from twinrun.testing.tracker_files import tensorboard_scalars, tensorboard_tags

    plan = sw.load_plan(out)
    (logdir,) = (tb / "twinrun" / "smoke-cpu").iterdir()
    assert logdir.name == f"smoke-cpu-sweep-{plan.sweep_id[:8]}"
    scalars = tensorboard_scalars(logdir)
    base = {r["game_index"]: r["outcome"] == "success" for r in read_rows(out / "arms" / "baseline.jsonl")}
    for step in (2, 4):
        rows = read_rows(out / "arms" / f"trl@{step}.jsonl")
        wins = {r["game_index"]: r["outcome"] == "success" for r in rows}
        assert scalars["sweep/trl/success_rate"][step] == pytest.approx(sum(wins.values()) / len(wins))
        assert scalars["sweep/trl/lift"][step] == pytest.approx(
            (sum(wins.values()) - sum(base.values())) / len(base), abs=1e-6)
    tags = tensorboard_tags(logdir)
    assert {"sweep/arms/text_summary", "compare/verdicts/text_summary", "compare/lifts/text_summary",
            "compare/report/text_summary"} <= set(tags["tensors"])
    assert {"compare/lift_curves", "compare/training_dynamics"} <= set(tags["images"])
    bad = runner.invoke(app, ["sweep", str(run_dir), "--spec", str(smoke_spec_path), "--out", str(out),
                              "--curator", "oracle"])
    assert bad.exit_code != 0


def test_cli_sweep_off_a_terminal_prints_a_progress_line_per_quarter(tmp_path: Path, smoke_spec_path: Path,
                                                                     run_dir: Path, alfworld_data: Path) -> None:
    """A sweep logged to a file (CI, nohup; CliRunner's output is not a terminal either) shows its progress as plain
    lines: rich draws its bars there only when they stop, so minutes of play printed nothing (make demo's log)."""
    from typer.testing import CliRunner

    from twinrun.cli import app
    from twinrun.core.sweeps.arms import LineProgress, _progress

    res = CliRunner().invoke(app, ["sweep", f"trl={run_dir}", "--spec", str(smoke_spec_path), "--out",
                                   str(tmp_path / "sweep"), "--games", "4", "--workers", "0", "--curator", "no-ops",
                                   "--streams", "1", "--set", "executor.max_turns=3"])
    assert res.exit_code == 0, res.output
    lines = [ln.split(" (")[0] for ln in res.output.splitlines() if ln.startswith("sweep: baseline ")]
    assert lines == [f"sweep: baseline {k}/4 games" for k in (1, 2, 3, 4)], res.output
    assert "sweep: trl@4 4/4 games" in res.output
    assert not isinstance(_progress(False), LineProgress)


def test_sweep_prompts_with_the_runs_history_window_and_restores_it_on_resume(
        tmp_path: Path, smoke_spec_path: Path, run_dir: Path, alfworld_data: Path) -> None:
    """per_position with curator.history=2: game i's curator sees the arm's last two (input, turn) pairs; a rerun
    that resumes after game 1 hands game 2 the same window (read back from the rows)."""
    seen: list[list[tuple[str, str]]] = []

    def recording_curator(arm: sw.ArmPlan, spec: object) -> sw.CuratorPolicy:
        base = inserting_curator(arm, spec)

        def policy(curator_input: str, history=()) -> str:
            seen.append([(h.curator_input, h.turn) for h in history])
            return base(curator_input)

        return policy

    spec = load_spec(smoke_spec_path, FAST_EXECUTOR + ["curator.history=2"])
    assert sw.eval_history(spec) == 2
    out = tmp_path / "sweep"
    sw.sweep(spec, {"trl": run_dir}, out, data_root=alfworld_data, n_games=4, workers=0,
             policy_factory=recording_curator, progress=False, arms=["trl@2"])
    rows = read_rows(out / "arms" / "trl@2.jsonl")
    pairs = [(r["curator_input"], r["curator_turn"]) for r in rows]
    assert all(a and b for a, b in pairs)
    assert seen == [[], pairs[:1], pairs[:2], pairs[1:3]]

    # resume after game 1: the window of game 2 comes from the recorded rows
    (out / "arms" / "trl@2.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:2]))
    seen.clear()
    sw.sweep(spec, {"trl": run_dir}, out, data_root=alfworld_data, n_games=4, workers=0,
             policy_factory=recording_curator, progress=False, arms=["trl@2"])
    assert seen[0] == pairs[:2]

    # history 0 (the paper): the policy is called with the input alone and rows keep no turn text
    assert sw.eval_history(load_spec(smoke_spec_path)) == 0
    assert sw.eval_history(load_spec(smoke_spec_path, ["curator.context=accumulated"])) == 0


def test_sweep_refuses_a_run_trained_in_another_shape(tmp_path: Path, smoke_spec_path: Path, run_dir: Path) -> None:
    run = tmp_path / "acc-run"
    checkpoint_folder(run / "checkpoints" / "step-000002")
    (run / "spec.yaml").write_text(smoke_spec_path.read_text().replace(
        "  precision: fp32\n", "  precision: fp32\n  context: accumulated\n", 1))
    spec = load_spec(smoke_spec_path)
    with pytest.raises(sw.SweepError, match=r"trained with curator.context=accumulated, history=0.*fix: --set "
                                            r"curator.context=accumulated"):
        sw.plan_sweep(spec, {"acc": run}, tmp_path / "sweep", games=[], split="valid_seen", executor_settings_hash="x")
