"""ROSE (online stitched SFT) under TRL and verl from one spec (issue 15 item 7), on CPU: the tiny student plays
2 replies on real ScienceWorld training variations, a scripted teacher behind a real loopback HTTP server
continues 3 replies from the student's own state, the student trains on the teacher's replies only; 2 rounds per
backend. TRL collects its own rounds; verl trains the same rounds' data (``--data-from``), so both frameworks see
identical data every round. Both continue AdamW's state across rounds."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

pytest.importorskip("trl")
pytest.importorskip("verl")
pytest.importorskip("scienceworld")

pytestmark = [pytest.mark.slow, pytest.mark.trl, pytest.mark.verl, pytest.mark.sciworld, pytest.mark.sampling]

REPO = Path(__file__).parents[2]
SPEC = REPO / "experiments" / "sft-sciworld-qwen3-1.7b.yaml"
TASK = "find-living-thing"
SETS = [
    "resources.gpus_per_node=0", "sft.model=tiny-qwen3", "curator.model=tiny-qwen3", "sft.batch_size=2",
    "sft.micro_batch_size=2", "sft.max_length=4096", "sft.lr=1e-4", f"sft.teacher.tasks=[{TASK}]",
    "sft.teacher.workers=1", "sft.rose.rounds=2", "sft.rose.student_turns=2", "sft.rose.teacher_turns=3",
    "sft.rose.variations_per_round=2", "sft.rose.student_max_tokens=8",
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, cache_dir):
    from twinrun.core.envs.scienceworld import ScienceWorldCatalog, SciWorldEnv
    from twinrun.core.sft.rose import round_games
    from twinrun.core.spec import load_spec
    from twinrun.app.rose import run_rose
    from twinrun.testing.local_openai import LocalOpenAIServer
    from twinrun.testing.sciworld_teacher import ScriptedSciWorldTeacher, gold_paths

    spec = load_spec(SPEC, SETS)
    cat = ScienceWorldCatalog("train", tasks=[TASK])
    train = sorted(cat.games(), key=lambda g: g.game_id)
    cat.close()
    games = {g.game_id: g for r in (1, 2) for g in round_games(train, 2, spec.seed, r)}
    env = SciWorldEnv(gold_path=True)
    try:
        gold = gold_paths(env, games.values())
    finally:
        env.shutdown()
    teacher = ScriptedSciWorldTeacher(gold, copy_share=0.2, seed=1)
    root = tmp_path_factory.mktemp("rose")
    log: list[str] = []
    with LocalOpenAIServer(teacher, record=True) as srv:
        trl = run_rose(spec, "trl", root / "trl", cache_dir=cache_dir, base_url=srv.base_url, model="scripted",
                       progress=log.append)
        teacher_requests = list(srv.requests)
    verl = run_rose(spec, "verl", root / "verl", cache_dir=cache_dir, data_from=root / "trl", progress=log.append,
                    train_kw={"timeout_s": 900})
    return {"spec": spec, "trl": trl, "verl": verl, "root": root, "log": log, "teacher": teacher,
            "requests": teacher_requests}


def _sha(p):
    return hashlib.sha256(Path(p).read_bytes()).hexdigest()[:16]


def test_two_rounds_each_backend_from_the_previous_checkpoint(runs):
    for backend in ("trl", "verl"):
        rounds = runs[backend]["rounds"]
        assert [r["round"] for r in rounds] == [1, 2] and all(r["backend"] == backend for r in rounds)
        assert rounds[0]["optimizer_from"] is None
        assert rounds[1]["optimizer_from"] == rounds[0]["optimizer_state"]  # carried, not restarted
        assert Path(rounds[1]["checkpoint"]).is_dir()
    from twinrun.core.sft.agent_eval.runs import run_checkpoints

    cks = run_checkpoints(runs["root"] / "verl")
    assert [c.stage for c in cks] == ["round 1", "round 2"] and cks[0].method.endswith("(verl)")
    assert any("round 2:" in m and "with its optimizer state" in m for m in runs["log"])


def test_teacher_turns_only_carry_loss_and_continue_the_students_state(runs):
    from transformers import AutoTokenizer

    from twinrun.core.sft.data import build_sft_dataset, decode_trained
    from twinrun.core.sft.trajectories import load_trajectories

    data = runs["root"] / "trl" / "rounds" / "round-01" / "data.jsonl"
    recs = load_trajectories(data)
    assert len(recs) == 2
    for r in recs:
        authors = r.meta["authors"]
        assert authors[:2] == ["student", "student"] and set(authors[2:]) == {"teacher"}
        replies = [t for t in r.turns if t.role == "assistant"][1:]  # after the canned acknowledgement
        assert [t.loss for t in replies] == [False if a == "student" else None for a in authors]
        assert r.meta["teacher_turns"] == 3 and r.meta["student_turns"] == 2
    # what the loss sees: exactly the teacher's replies (and their end-of-turn token)
    tok = AutoTokenizer.from_pretrained(runs["trl"]["rounds"][0]["checkpoint"])
    ds = build_sft_dataset(recs, tok, max_length=4096, seed=0)
    for ex in ds.examples:
        rec = next(r for r in recs if r.id == ex.id)
        teacher_replies = [t.content for t in rec.turns if t.role == "assistant" and t.loss is None]
        assert [s.removesuffix("<|im_end|>") for s in decode_trained(tok, ex)] == teacher_replies
    # the teacher saw the student's replies: its first request of an episode already holds 2 assistant turns
    firsts = [q for q in runs["requests"] if sum(m["role"] == "assistant" for m in q["messages"]) == 3]
    assert len(firsts) == 4  # 2 episodes x 2 rounds


def test_identical_data_per_round_and_same_steps_in_both_backends(runs):
    from twinrun.core.records import read_jsonl

    for r in (1, 2):
        a = runs["root"] / "trl" / "rounds" / f"round-{r:02d}"
        b = runs["root"] / "verl" / "rounds" / f"round-{r:02d}"
        assert _sha(a / "data.jsonl") == _sha(b / "data.jsonl")
        ra = sorted(read_jsonl(a / "sft" / "metrics.jsonl"), key=lambda x: x["step"])
        rb = sorted(read_jsonl(b / "sft" / "metrics.jsonl"), key=lambda x: x["step"])
        assert len(ra) == len(rb) == 1
        for x, y in zip(ra, rb, strict=True):
            assert x["example_ids"] == y["example_ids"] and x["trained_tokens"] == y["trained_tokens"]
            assert x["lr"] == pytest.approx(y["lr"], abs=1e-12)


def _adam_steps(state: dict) -> set[float]:
    return {float(s["step"]) for s in state["state"].values()}


def test_adamw_state_is_carried_across_rounds_in_both_backends(runs):
    """Each round is 1 optimizer step: the step count after round 2 is 2 (a restarted AdamW would say 1), and round
    2's first moments start from round 1's (they differ from a fresh optimizer's first step by beta1)."""
    import torch

    trl1, trl2 = (torch.load(Path(r["optimizer_state"]) / "optimizer.pt", weights_only=True)
                  for r in runs["trl"]["rounds"])
    assert _adam_steps(trl1) == {1.0} and _adam_steps(trl2) == {2.0}
    v1, v2 = (torch.load(Path(r["optimizer_state"]) / "optim_world_size_1_rank_0.pt", weights_only=False)
              for r in runs["verl"]["rounds"])
    assert _adam_steps(v1) == {1.0} and _adam_steps(v2) == {2.0}
    # the moments continue: round 2's exp_avg_sq holds round 1's squared gradients decayed by beta2, so it is at
    # least beta2 x round 1's everywhere (a fresh optimizer would hold only (1 - beta2) x g^2)
    for first, second in ((trl1, trl2), (v1, v2)):
        k = next(iter(first["state"]))
        a = first["state"][k]["exp_avg_sq"]
        b = second["state"][k]["exp_avg_sq"]
        a = a.to_local() if hasattr(a, "to_local") else a  # verl's FSDP2 state: DTensors (one rank: local = full)
        b = b.to_local() if hasattr(b, "to_local") else b
        assert torch.all(b >= 0.999 * a - 1e-12)
