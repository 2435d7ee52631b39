"""Both backends produce the same per_position rows for the same seeds and the same curator turns.

Scripted turns (no sampling): the generation step of each backend is replaced by a script that answers position p
of rollout r with a fixed text (a fake *generator* only: every other piece is real: core's sessions, the real
ALFWorld engine and scripted executor, the tiny Qwen3 tokenizer, TRL's PositionStepper, verl's per_position agent
loop body and its tag/estimator path). The rows' prompt token ids, completion ids and advantages must be equal."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import numpy as np
import pytest
import yaml

pytest.importorskip("trl")
pytest.importorskip("verl")

from twinrun.core.spec import load_spec  # noqa: E402
from twinrun.core.curation.toolcalls import format_curate_call  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.trl, pytest.mark.verl, pytest.mark.alfworld]

N = 2  # rollouts of the one task group


def scripted_turn(r: int, p: int) -> str:
    """Rollout 0 writes a skill at every position; rollout 1 only at position 1 (its later turns are invalid)."""
    if r == 1 and p > 1:
        return "no tool call here"
    name = f"s-{r}-{p}"
    content = f"---\nname: {name}\ndescription: from position {p}\n---\n# Workflow\n1. look around\n"
    return format_curate_call([{"function": "new_skill_insert", "arguments": {"skill_name": name, "content": content}}])


@pytest.mark.parametrize("estimator", ["grpo", "gigpo"])
def test_trl_and_verl_train_the_same_rows_for_the_same_turns(estimator, repo_root, cache_dir, alfworld_data,
                                                             tmp_path):
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer

    from twinrun.core.curation.positions import PositionStepper, Slot, slot_scores
    from twinrun.backends.verl.estimators import decode_uid, position_rows
    from twinrun.backends.verl.loop_manager import TAG_FIELD
    from twinrun.backends.verl.names import MESSAGES_FIELD, ROW_TOKENS_KEY
    from twinrun.backends.verl.position_loop import run_per_position
    from twinrun.backends.verl.session import CurationContext
    from twinrun.core.curation import CurationRuntime
    from twinrun.core.rewards.composite import token_counter
    from twinrun.core.advantages.training_rows import row_advantages
    from twinrun.models import build_tiny_qwen3

    spec = load_spec(repo_root / "experiments" / "smoke-cpu.yaml",
                     ["executor.max_turns=3", "environment.workers=1", f"algorithm.estimator={estimator}"])
    g = spec.environment.group_size
    tok = AutoTokenizer.from_pretrained(build_tiny_qwen3(cache_dir))

    def ids(r: int, p: int) -> list[int]:
        return tok.encode(scripted_turn(r, p), add_special_tokens=False) + [tok.eos_token_id]

    # --- TRL: PositionStepper over N rollouts of one group, the trainer's generation replaced by the script
    runtime = CurationRuntime.from_spec(spec, data_root=alfworld_data, count_tokens=token_counter(tok))
    try:
        group = runtime.task_group(0, 0)
        slots = [Slot(group, r, p) for r in range(N) for p in range(1, g + 1)]
        calls = iter(range(1, g + 1))

        def generate(prompts: list[list[int]]):
            p = next(calls)
            return [ids(r, p) for r in range(len(prompts))], None

        out = PositionStepper(runtime, tok, history=0, max_prompt_tokens=spec.curator.max_prompt_tokens).run(
            slots, generate)
        trl_adv = row_advantages(spec.algorithm, slot_scores(slots, out.results))
    finally:
        runtime.close()
    trl_rows = {(s.rollout_index, s.position): (out.prompt_ids[i], out.completion_ids[i], trl_adv[i])
                for i, s in enumerate(slots)}

    # --- verl: the per_position agent loop body, the rollout server replaced by the script
    run_dir = tmp_path / "verl-run"
    run_dir.mkdir()
    (run_dir / "spec.yaml").write_text(yaml.safe_dump(json.loads(spec.canonical_json()), sort_keys=False))
    ctx = CurationContext(str(run_dir / "spec.yaml"), str(run_dir), str(repo_root / "experiments"), tok)

    class ScriptedServer:
        def __init__(self, r: int):
            self.r, self.p = r, 0

        async def generate(self, *, request_id: str, prompt_ids: list[int], sampling_params: dict) -> SimpleNamespace:
            self.p += 1
            return SimpleNamespace(token_ids=ids(self.r, self.p), log_probs=None, extra_fields={})

    outputs = []
    try:
        for r in range(N):
            agent = SimpleNamespace(ctx=ctx, tokenizer=tok, server_manager=ScriptedServer(r),
                                    config=OmegaConf.create({"trainer": {ROW_TOKENS_KEY: True}}))
            kwargs = {"twinrun_group": json.dumps(group.to_row()), "uid": "uid-0", "session_id": r, "global_steps": 1}
            outputs += asyncio.run(run_per_position(agent, {"temperature": 1.0}, kwargs))
    finally:
        ctx.runtime.close()
    decoded = [decode_uid(o.extra_fields[TAG_FIELD]) for o in outputs]
    verl_adv = row_advantages(spec.algorithm, position_rows([d[0] for d in decoded], [d[1] for d in decoded]))
    assert len(outputs) == N * g and all(MESSAGES_FIELD in o.extra_fields for o in outputs)

    for o, (_, tag), adv in zip(outputs, decoded, verl_adv, strict=True):
        prompt, completion, want = trl_rows[(tag.rollout, tag.position)]
        assert list(o.prompt_ids) == prompt, (tag.rollout, tag.position)
        assert list(o.response_ids) == completion and o.response_mask == [1] * len(completion)
        assert adv == pytest.approx(want, abs=1e-9)
    assert len({round(float(a), 9) for a in trl_adv}) > 1, "the script must give the rollouts different advantages"
    assert np.isfinite(trl_adv).all()
