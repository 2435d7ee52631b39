"""GiGPO anchors for a curator (core.anchors, algorithm.gigpo.anchor): comparable decisions share a step group.

The batches are real: the smoke arm's curation runtime (real ALFWorld games, its scripted executor, the rules
judge) played by a scripted curator whose turns are seeded draws (a valid insert, an update, an invalid op, or
no call), so the step rewards differ across rollouts the way a sampling policy's do."""

from __future__ import annotations

import random

import numpy as np
import pytest

from twinrun.core.advantages import estimator_config
from twinrun.core.advantages.anchors import AnchorError, anchor_stats, record_anchors, step_rows
from twinrun.core.curation import CurationRuntime
from twinrun.core.spec import load_spec
from twinrun.core.curation.toolcalls import format_curate_call


def _skill(name: str, body: str) -> str:
    return f"---\nname: {name}\ndescription: How to find an object and put it somewhere in {name}.\n---\n# Steps\n{body}\n"


def scripted_turn(rng: random.Random, position: int) -> str:
    kind = rng.choice(["insert", "insert", "insert", "update", "invalid", "none"])
    name = f"skill-{position}-{rng.randrange(3)}"
    if kind == "insert":
        ops = [{"function": "new_skill_insert", "arguments": {
            "skill_name": name, "content": _skill(name, "1. look around\n" * rng.randrange(1, 6))}}]
    elif kind == "update":
        ops = [{"function": "skill_update", "arguments": {"skill_name": name, "new_content": _skill(name, "1. go")}}]
    elif kind == "invalid":
        ops = [{"function": "skill_delete", "arguments": {"skill_name": "no-such-skill"}}]
    else:
        return "I have nothing to add."
    return format_curate_call(ops)


def play(rt: CurationRuntime, step: int, rollouts: int, seed: int, change: tuple[int, int] | None = None) -> list[dict]:
    """One step of the smoke arm: every task group x ``rollouts`` scripted rollouts -> rollouts.jsonl rows.
    ``change=(rollout, position)``: only that rollout of the first group, with another turn at that position."""
    rows = []
    for group in rt.sampler.step_groups(step)[:1 if change else None]:
        for r in (range(rollouts) if change is None else [change[0]]):
            rng = random.Random(f"{seed}/{group.group_id}/{r}")
            s = rt.session(group, r)
            s.start()
            while not s.done:
                turn = scripted_turn(rng, s.position)
                if change == (r, s.position):
                    turn = format_curate_call([{"function": "new_skill_insert", "arguments": {
                        "skill_name": "changed", "content": _skill("changed", "1. open every drawer first")}}])
                s.submit(turn)
            rows.append(s.finish().record.model_dump(mode="json"))
    return rows


@pytest.fixture(scope="module")
def smoke_batch(repo_root, alfworld_data):
    """|G| = 3, 2 task groups x 4 rollouts, two training steps of the smoke arm under estimator: gigpo (about
    90 s: 50 real ALFWorld episodes)."""
    spec = load_spec(repo_root / "experiments" / "smoke-cpu.yaml",
                     ["algorithm.estimator=gigpo", "batch.rollouts_per_group=4"])
    with CurationRuntime.from_spec(spec, environ={"ALFWORLD_DATA": str(alfworld_data)}, workers=0) as rt:
        rows = play(rt, 0, 4, seed=1) + play(rt, 1, 4, seed=2)
        changed = play(rt, 0, 4, seed=1, change=(0, 2))
    return spec, rows, changed


@pytest.mark.slow
def test_default_anchor_groups_comparable_decisions(smoke_batch):
    spec, rows, _ = smoke_batch
    assert spec.algorithm.gigpo.anchor == "position_outcome"
    cfg = estimator_config(spec.algorithm)
    stats = {kind: anchor_stats(cfg, step_rows(rows, kind=kind)) for kind in ("position_outcome", "position",
                                                                               "exact_input")}
    for kind, st in stats.items():
        print(f"{kind}: singleton share {st['anchor_singleton_share']:.3f}, "
              f"|A^S|>1e-9 share {st['step_adv_nonzero_share']:.3f} over {st['measured_rows']} rows")
    assert stats["position_outcome"]["measured_rows"] == 2 * 2 * 4 * 3
    assert stats["position_outcome"]["anchor_singleton_share"] <= 0.25
    assert stats["position_outcome"]["step_adv_nonzero_share"] > 0.5
    assert stats["position"]["anchor_singleton_share"] == 0.0
    # the exact curator input holds each rollout's own trajectory and repo: GiGPO degenerates to GRPO there
    assert stats["exact_input"]["anchor_singleton_share"] > 0.5
    # what the session recorded is the default anchor: re-keying to it changes nothing
    assert all(record_anchors(r) == record_anchors(r, "position_outcome") for r in rows)


@pytest.mark.slow
def test_the_curators_own_turn_never_moves_its_anchor(smoke_batch):
    """Changing rollout 0's turn at position 2 leaves the anchors of positions 1 and 2 (fixed before the curator
    acts there) unchanged; only what follows from the new repo may move (the exact input at position 3 does)."""
    _, rows, changed = smoke_batch
    before, after = rows[0], changed[0]
    assert before["positions"][1]["ops"] != after["positions"][1]["ops"]
    for kind in ("position_outcome", "position", "exact_input"):
        a, b = record_anchors(before, kind), record_anchors(after, kind)
        assert a[:2] == b[:2], kind
    assert record_anchors(before, "exact_input")[2] != record_anchors(after, "exact_input")[2]


@pytest.mark.slow
def test_a_bad_anchor_is_one_line(smoke_batch, repo_root):
    _, rows, _ = smoke_batch
    with pytest.raises(AnchorError, match="algorithm.gigpo.anchor: 'nope' is not an anchor"):
        record_anchors(rows[0], "nope")
    with pytest.raises(AnchorError, match="no curator_input texts"):
        record_anchors(rows[0], None, match="similarity")
    with pytest.raises(ValueError, match="anchor_match: similarity compares curator input texts"):
        load_spec(repo_root / "experiments" / "smoke-cpu.yaml", ["algorithm.gigpo.anchor_match=similarity"])


@pytest.mark.slow
def test_advdiff_rekeys_a_saved_run(smoke_batch, tmp_path):
    import json

    from twinrun.core.advantages.advdiff import AdvdiffInputError, compute_table, load_rows

    _, rows, _ = smoke_batch
    path = tmp_path / "rollouts.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    own = compute_table(load_rows(path), ["verl_agent_gigpo"]).advantages["verl_agent_gigpo"]
    exact = compute_table(load_rows(path, "exact_input"), ["verl_agent_gigpo"]).advantages["verl_agent_gigpo"]
    assert np.allclose(own, compute_table(load_rows(path, "position_outcome"),
                                          ["verl_agent_gigpo"]).advantages["verl_agent_gigpo"])
    assert not np.allclose(own, exact)
    with pytest.raises(AdvdiffInputError, match="--anchor: 'x' is not an anchor"):
        load_rows(path, "x")
