"""`twinrun sft-data SPEC --teacher openai` end to end (issue 15 items 1-2): the real ScienceWorld simulator, a real
loopback HTTP server, a scripted teacher behind it (it copies `open/close OBJ` in a set share of turns and gives
up in a set share of episodes). Every episode is kept with its failures and rejected actions, the stats line
counts exactly what the teacher sent, a rejected parameter stops the run before any episode, a killed run
resumes."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = [pytest.mark.sciworld, pytest.mark.slow]

REPO = Path(__file__).parents[3]
SPEC = REPO / "experiments" / "sft-sciworld-cpu.yaml"
TASK = "find-living-thing"
# the study's 30 replies per episode: gold paths here are 12-16 actions, and 30% of replies are copies
SETS = [f"sft.teacher.tasks=[{TASK}]", "sft.teacher.variations=4", "sft.teacher.workers=2"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    pytest.importorskip("scienceworld")
    from typer.testing import CliRunner

    from twinrun.cli import app
    from twinrun.core.sft.agent_eval import sample_games
    from twinrun.core.envs.scienceworld import ScienceWorldCatalog, SciWorldEnv
    from twinrun.core.spec import load_spec
    from twinrun.testing.local_openai import LocalOpenAIServer
    from twinrun.testing.sciworld_teacher import ScriptedSciWorldTeacher, gold_paths

    spec = load_spec(SPEC, SETS)
    cat = ScienceWorldCatalog("train", tasks=[TASK])
    games = sample_games(sorted(cat.games(), key=lambda g: g.game_id), 4, spec.seed)  # what the command draws
    cat.close()
    env = SciWorldEnv(gold_path=True)
    try:
        gold = gold_paths(env, games)
    finally:
        env.shutdown()
    teacher = ScriptedSciWorldTeacher(gold, copy_share=0.3, give_up_share=0.5, seed=3, think=True)
    root = tmp_path_factory.mktemp("teacher")
    out = root / "teacher.jsonl"
    with LocalOpenAIServer(teacher, record=True) as srv:
        args = ["sft-data", str(SPEC), "--teacher", "openai", "--base-url", srv.base_url, "--model", "scripted",
                "--out", str(out), *[x for s in SETS for x in ("--set", s)]]
        res = CliRunner().invoke(app, args)
        first_calls = srv.calls
        again = CliRunner().invoke(app, args)  # everything on file: nothing replayed
        again_calls = srv.calls - first_calls
    return {"res": res, "again": again, "again_calls": again_calls, "out": out, "teacher": teacher, "games": games,
            "gold": gold, "args": args, "root": root, "srv_requests": srv.requests}


def test_every_episode_is_kept_with_its_failures_and_rejected_actions(built):
    from twinrun.core.sft.trajectories import load_trajectories

    assert built["res"].exit_code == 0, built["res"].output
    recs = load_trajectories(built["out"])
    assert sorted(r.variation for r in recs) == sorted(g.variation for g in built["games"])
    assert {r.teacher for r in recs} == {"scripted"} and all(r.split == "train" for r in recs)
    quitters = {r.id for r in recs if built["teacher"].episode_gives_up(r.turns[2].content)}
    assert quitters and len(quitters) < len(recs)  # the set share gives both kinds here
    for r in recs:
        replies = [t for t in r.turns if t.role == "assistant" and t.loss is None]
        assert r.turns[1].loss is False and 1 <= len(replies) <= 30
        assert all("<think>" not in t.content and t.content.startswith("Thought:\n") for t in replies)
        assert r.meta["turns"] == len(replies)
        if r.id in quitters:  # a teacher that gave up fails, and its episode is kept anyway
            assert r.success is False and len(replies) == 30
    assert any(r.success for r in recs)
    observations = [t.content for r in recs for t in r.turns[3:] if t.role == "user"]
    assert any(o.startswith("No known action matches that input.") for o in observations)
    assert sum(r.meta["rejected_actions"] for r in recs) >= sum(r.meta["literal_copies"] for r in recs) > 0


def test_stats_count_exactly_what_the_teacher_sent(built):
    from twinrun.core.sft.stats import trajectory_stats
    from twinrun.core.sft.trajectories import load_trajectories

    s = trajectory_stats(load_trajectories(built["out"]))
    served = built["teacher"].served
    assert s["supervised_turns"] == served["replies"] and s["literal_copies"] == served["literal_copies"]
    assert s["teacher_success"] == sum(r.success for r in load_trajectories(built["out"])) / 4
    out = built["res"].output
    assert f"4 episodes, teacher success {100 * s['teacher_success']:.2f}%" in out
    assert f"{s['supervised_turns']} supervised turns, literal template copies (open/close OBJ) " \
           f"{100 * s['literal_share']:.2f}%" in out
    assert "[4/4] " in out and "probing http://127.0.0.1:" in out  # progress and the probe, on stderr
    # what reached the endpoint: the spec's sampling parameters, the seed, the conversation
    req = built["srv_requests"][-1]
    assert {k for k in req if k not in ("model", "messages")} == {"temperature", "top_p", "max_tokens", "seed"}


def test_rerun_replays_nothing_and_a_killed_run_resumes(built, tmp_path):
    from typer.testing import CliRunner

    from twinrun.cli import app
    from twinrun.core.sft.trajectories import load_trajectories
    from twinrun.testing.local_openai import LocalOpenAIServer
    from twinrun.testing.sciworld_teacher import ScriptedSciWorldTeacher

    assert built["again"].exit_code == 0 and "0 written, 4 already there" in built["again"].output
    assert built["again_calls"] == 1  # the probe only
    lines = built["out"].read_text().splitlines(keepends=True)
    part = tmp_path / "teacher.jsonl"
    part.write_text("".join(lines[:2]) + lines[2][: len(lines[2]) // 2])  # killed while writing the third
    teacher = ScriptedSciWorldTeacher(built["gold"], copy_share=0.3, give_up_share=0.5, seed=3, think=True)
    with LocalOpenAIServer(teacher) as srv:
        args = [a if a != str(built["out"]) else str(part) for a in built["args"]]
        args[args.index("--base-url") + 1] = srv.base_url
        res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "2 written, 2 already there" in res.output
    assert sorted(r.id for r in load_trajectories(part)) == sorted(r.id for r in load_trajectories(built["out"]))


def test_a_rejected_parameter_stops_before_any_episode(built, tmp_path):
    from typer.testing import CliRunner

    from twinrun.cli import app
    from twinrun.core.errors import TwinrunError
    from twinrun.testing.local_openai import LocalOpenAIServer

    out = tmp_path / "never.jsonl"
    with LocalOpenAIServer(lambda r: "x", rejects=("temperature", "max_tokens")) as srv:
        args = [a if a != str(built["out"]) else str(out) for a in built["args"]]
        args[args.index("--base-url") + 1] = srv.base_url
        res = CliRunner().invoke(app, args)
        assert srv.calls == 0
    assert isinstance(res.exception, TwinrunError)
    msg = str(res.exception)
    assert "\n" not in msg and msg.startswith("sft.teacher.send: the endpoint rejects 'temperature'")
    assert not out.exists()
