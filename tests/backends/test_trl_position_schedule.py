"""TRL per_position without a barrier between positions: PositionStepper's ``ready`` schedule (a rollout's next
position starts as soon as its own turn is generated) against the ``barrier`` schedule (every rollout's turn p in
one call), on real ALFWorld games with the scripted executor and a scripted curator (the turn is a forced curate
call derived from the prompt tokens, so no test depends on a sampled token).

1. The same rows: prompt and completion ids, messages, rewards, step rewards, anchors and core's advantages
   (GRPO and GiGPO) are identical slot for slot.
2. No barrier: rollout 0's position-1 episode is held until the curator has been asked for another rollout's
   position-2 turn, which happens only if that rollout went on without waiting for rollout 0.
"""

from __future__ import annotations

import asyncio
import hashlib
import time

import numpy as np
import pytest

pytest.importorskip("transformers")

from twinrun.core.advantages import PRESETS  # noqa: E402
from twinrun.core.curation import CurationRuntime, CuratorPrompts, TaskGroup  # noqa: E402
from twinrun.core.envs import EnvPool  # noqa: E402
from twinrun.core.envs.alfworld import AlfWorldCatalog  # noqa: E402
from twinrun.core.executors import Executor, ScriptedPolicy  # noqa: E402
from twinrun.core.rewards.judges import RulesJudge  # noqa: E402
from twinrun.core.executors.react import ExecutorPrompts  # noqa: E402
from twinrun.core.rewards.composite import whitespace_tokens  # noqa: E402
from twinrun.core.skills.repository import SkillRepo  # noqa: E402
from twinrun.core.spec import RewardSpec  # noqa: E402
from twinrun.core.envs.task_groups import rollout_episode_seed  # noqa: E402
from twinrun.core.curation.toolcalls import format_curate_call  # noqa: E402
from twinrun.core.advantages.training_rows import row_advantages  # noqa: E402

pytestmark = pytest.mark.alfworld

GROUP_SIZE = 3
ROLLOUTS = 2  # per group; two groups -> four rollouts


@pytest.fixture(scope="module")
def tokenizer(cache_dir):
    from transformers import AutoTokenizer

    from twinrun.models.tiny import resolve_model

    return AutoTokenizer.from_pretrained(resolve_model("tiny-qwen3", cache_dir))


@pytest.fixture(scope="module")
def groups(alfworld_data) -> list[TaskGroup]:
    cat = AlfWorldCatalog(alfworld_data, "valid_seen")
    out = []
    for k, ttype in enumerate(("pick", "look")):
        games = sorted(cat.games(ttype), key=lambda g: g.game_id)[:GROUP_SIZE]
        out.append(TaskGroup(f"sched-{k}", ttype, tuple(games)))
    return out


@pytest.fixture(scope="module")
def pool():
    with EnvPool("alfworld", workers=0, options={"expert_type": "handcoded"}) as p:
        yield p


class GatedRuntime(CurationRuntime):
    """A real runtime that holds one episode (``held``: game id and seed of rollout 0's position 1) until another
    rollout's position-2 episode has begun; every other episode plays at once."""

    held: tuple[str, int] | None = None
    gate: asyncio.Event | None = None

    async def _play(self, game, repo, *, seed, position):
        if self.gate is None:
            self.gate = asyncio.Event()  # created on the rollout loop, where it is awaited
        if position >= 2:
            self.gate.set()
        elif (game.game_id, seed) == self.held:
            await asyncio.wait_for(self.gate.wait(), timeout=60)
        return await super()._play(game, repo, seed=seed, position=position)


class StaggeredRuntime(CurationRuntime):
    """A real runtime whose episodes start after a fixed delay that varies with (game, seed, position), so that
    under the ready schedule rollouts drift apart and the curator's calls mix rollouts at different positions."""

    async def _play(self, game, repo, *, seed, position):
        await asyncio.sleep(0.05 * ((seed + 3 * position) % 7))
        return await super()._play(game, repo, seed=seed, position=position)


def make_runtime(pool, repo_root, cls=CurationRuntime) -> CurationRuntime:
    p = repo_root / "experiments" / "prompts"
    executor = Executor(ScriptedPolicy(0.7), ExecutorPrompts.from_files(p / "executor_system.md",
                                                                                 p / "executor_input.md"),
                        max_turns=8, history=3, settings_hash="ex")
    return cls(
        env_name="alfworld", pool=pool, executor=executor,
        curator_prompts=CuratorPrompts.from_files(p / "curator_system.md", p / "curator_input.md"),
        reward=RewardSpec(), new_repo=lambda: SkillRepo(top_k=5), top_k=5, group_size=GROUP_SIZE,
        judge=RulesJudge(), count_tokens=whitespace_tokens, seed=1, owns_pool=False, anchor="position_outcome",
    )


def scripted_curator(tokenizer, calls: list[list[int]] | None = None):
    """A curator whose turn is a function of its prompt tokens alone: a forced curate call inserting a skill named
    after the prompt's hash (every third prompt writes nothing valid, so r_fc varies)."""

    def generate(prompt_ids: list[list[int]]):
        if calls is not None:
            calls.append([len(p) for p in prompt_ids])
        time.sleep(0.1)  # a curator call takes time: episodes that end meanwhile join the next call
        out = []
        for ids in prompt_ids:
            h = hashlib.sha256(str(ids).encode()).hexdigest()
            if int(h[:2], 16) % 3 == 0:
                text = "I will not write a skill this time."
            else:
                name = f"skill-{h[:8]}"
                text = format_curate_call([{"function": "new_skill_insert", "arguments": {
                    "skill_name": name,
                    "content": f"---\nname: {name}\ndescription: Find the object, take it, put it in place.\n---\n"
                               f"# Steps\n1. Look on the receptacles first ({h[8:14]}).\n"}}])
            out.append(tokenizer.encode(text))
        return out, None

    return generate


def slots_for(groups):
    from twinrun.core.curation.positions import Slot

    return [Slot(g, r, p) for g in groups for r in range(ROLLOUTS) for p in range(1, GROUP_SIZE + 1)]


def run_schedule(schedule, pool, repo_root, groups, tokenizer, calls):
    from twinrun.core.curation.positions import PositionStepper

    with make_runtime(pool, repo_root, StaggeredRuntime) as rt:
        stepper = PositionStepper(rt, tokenizer, history=0, max_prompt_tokens=None, schedule=schedule)
        slots = slots_for(groups)
        return slots, stepper.run(slots, scripted_curator(tokenizer, calls))


def test_ready_schedule_trains_the_barrier_schedules_rows(pool, repo_root, groups, tokenizer):
    from twinrun.core.curation.positions import slot_scores

    rollouts = len(groups) * ROLLOUTS
    barrier_calls: list[list[int]] = []
    ready_calls: list[list[int]] = []
    slots, barrier = run_schedule("barrier", pool, repo_root, groups, tokenizer, barrier_calls)
    _, ready = run_schedule("ready", pool, repo_root, groups, tokenizer, ready_calls)
    assert [len(c) for c in barrier_calls] == [rollouts] * GROUP_SIZE
    # the ready schedule made more, smaller calls, some of them with several rollouts (the micro-batches)
    assert len(ready_calls) > GROUP_SIZE and max(len(c) for c in ready_calls) > 1
    assert sum(len(c) for c in ready_calls) == rollouts * GROUP_SIZE
    assert barrier.prompt_ids == ready.prompt_ids and barrier.completion_ids == ready.completion_ids
    assert barrier.messages == ready.messages and all(barrier.prompt_ids)
    assert set(barrier.results) == set(ready.results)
    written = 0
    for key, res in barrier.results.items():
        other = ready.results[key]
        assert res.total == other.total and res.step_rewards == other.step_rewards and res.anchors == other.anchors
        assert [p.no_valid_call for p in res.record.positions] == [p.no_valid_call for p in other.record.positions]
        written += sum(not p.no_valid_call for p in res.record.positions)
    assert written > 0  # the forced calls reached the repo
    sb, sr = slot_scores(slots, barrier.results), slot_scores(slots, ready.results)
    assert sb == sr
    totals = {res.total for res in barrier.results.values()}
    assert len(totals) > 1  # the advantages below are not all zero
    for name in ("verl", "verl_agent_gigpo_alfworld"):
        a, b = row_advantages(PRESETS[name].config, sb), row_advantages(PRESETS[name].config, sr)
        np.testing.assert_array_equal(a, b)
        assert np.abs(a).max() > 0


def test_ready_schedule_has_no_barrier_between_positions(pool, repo_root, groups, tokenizer):
    from twinrun.core.curation.positions import PositionStepper

    with make_runtime(pool, repo_root, GatedRuntime) as rt:
        first = groups[0]
        rt.held = (first.games[0].game_id, rollout_episode_seed(rt.seed, first.group_id, 0, 1))
        stepper = PositionStepper(rt, tokenizer, history=0, max_prompt_tokens=None, schedule="ready")
        calls: list[list[int]] = []
        out = stepper.run(slots_for(groups), scripted_curator(tokenizer, calls))
    # rollout 0's position 1 began only after another rollout's position 2 had: under a barrier that never happens
    # (its wait times out after 60 s and the step fails), so the other rollouts ran on past position 1 without it
    assert len(out.results) == len(groups) * ROLLOUTS and all(out.completion_ids)
    assert len(calls[0]) < len(groups) * ROLLOUTS  # the first curator call did not wait for every rollout
