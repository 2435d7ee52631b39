"""ROSE's data side without training (issue 15 item 7): the real tiny student (transformers) plays a prefix on a real
ScienceWorld training variation, a scripted teacher behind a real loopback HTTP server continues the same running
episode, and the record trains the teacher's replies only. The two-round, two-backend run is
tests/backends/test_rose.py."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.sciworld, pytest.mark.slow, pytest.mark.sampling]

TASK = "find-living-thing"


def test_teacher_continues_the_students_episode_and_only_its_replies_carry_loss(tmp_path, cache_dir):
    pytest.importorskip("scienceworld")
    pytest.importorskip("transformers")
    from twinrun.core.sft.agent_eval import AgentEvalSettings, hf_generator
    from twinrun.core.envs.scienceworld import ScienceWorldCatalog, SciWorldEnv
    from twinrun.core.executors import BackgroundLoop
    from twinrun.core.sft.rose import collect_round, round_games
    from twinrun.core.sft.data import sciworld_instruction
    from twinrun.core.spec import TeacherSpec
    from twinrun.core.sft.trajectories import load_trajectories
    from twinrun.core.sft.teacher import teacher_generator
    from twinrun.models import resolve_model
    from twinrun.testing.local_openai import LocalOpenAIServer
    from twinrun.testing.sciworld_teacher import ScriptedSciWorldTeacher, gold_paths

    cat = ScienceWorldCatalog("train", tasks=[TASK])
    games = round_games(sorted(cat.games(), key=lambda g: g.game_id), 1, 0, 1)
    cat.close()
    env = SciWorldEnv(gold_path=True)
    try:
        gold = gold_paths(env, games)
    finally:
        env.shutdown()
    teacher = ScriptedSciWorldTeacher(gold, copy_share=0.0, seed=1)
    tiny = resolve_model("tiny-qwen3", cache_dir)
    hf = hf_generator(tiny, AgentEvalSettings(max_tokens=8, thinking=False, temperature=0.4))

    def student(messages, seed):  # an untrained student can emit a stray "</think>" (seen in a real round 2)
        return "stray</think>" + hf(messages, seed)

    out = tmp_path / "round-01.jsonl"
    loop = BackgroundLoop(name="test-rose")
    env = SciWorldEnv(gold_path=False)
    try:
        with LocalOpenAIServer(teacher, record=True) as srv:
            gen = teacher_generator(TeacherSpec(), base_url=srv.base_url, model="scripted", api_key="x", loop=loop)
            report = collect_round(env, games, out, student=student, teacher=gen, student_turns=2, teacher_turns=3,
                                   round_index=1, seed=0, instruction=sciworld_instruction(),
                                   literal=["open/close OBJ"], student_name="tiny", teacher_name="scripted")
            requests = list(srv.requests)
            again = collect_round(env, games, out, student=student, teacher=gen, student_turns=2, teacher_turns=3,
                                  round_index=1, seed=0, instruction=sciworld_instruction(),
                                  literal=["open/close OBJ"], student_name="tiny", teacher_name="scripted")
    finally:
        env.shutdown()
        loop.close()
    assert report.written == 1 and not report.unmeasured and again.skipped_existing == 1 and again.written == 0
    (rec,) = load_trajectories(out)
    assert rec.meta["authors"] == ["student", "student", "teacher", "teacher", "teacher"]
    replies = [t for t in rec.turns if t.role == "assistant"][1:]  # after the canned acknowledgement
    assert [t.loss for t in replies] == [False, False, None, None, None]
    assert rec.meta["student_turns"] == 2 and rec.meta["teacher_turns"] == 3 and rec.teacher == "scripted"
    # the stray "</think>" is gone (Qwen3's template would split the reply there) and the record tokenizes
    assert all("</think>" not in t.content for t in replies)
    from transformers import AutoTokenizer

    from twinrun.core.sft.data import build_sft_dataset

    (ex,) = build_sft_dataset([rec], AutoTokenizer.from_pretrained(tiny), max_length=4096, seed=0).examples
    assert ex.trained_tokens > 0
    # the teacher's first request holds the student's two replies: it continues the student's own state
    assert len(requests) == 3
    first = requests[0]["messages"]
    assert [m["content"] for m in first if m["role"] == "assistant"][1:] == [t.content for t in replies[:2]]
