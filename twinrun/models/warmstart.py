"""Warm start of the tiny local curator: a short SFT on well-formed ``curate`` tool-call conversations.

A random tiny model never writes ``<tool_call>``, so an RL run on it would never exercise the tool loop (no
operations, no repo, r_fc = 0 everywhere). Before the first RL step, both backends therefore start the tiny curator
from the same warm-started weights: a few hundred AdamW steps on conversations that look exactly like a curation
rollout (the spec's curator system prompt, the ``curate`` tool schema from core, real curator inputs chi_i recorded
from real curation sessions of the spec's environment and executor) whose assistant turns are well-formed
``curate`` calls whose writes vary in relevance (:data:`SKILL_BODIES`) and fit the repository (an insert where the
type's skill is missing, an update where it is there: :func:`_op_templates`). This is a test device, not an
experimental knob: it runs only for ``curator.model: tiny-qwen3``, its settings are constants here, and what it did
is written to ``warmstart.json`` next to the weights.

Rendering uses TRL's training variant of the Qwen3 template (the one GRPOTrainer itself renders multi-turn
rollouts with), so the SFT tokens are the tokens the RL rollouts produce. The loss is on assistant tokens only.

Cached under the caller's cache folder by a key of everything that decides the result (base model, prompts, tool
schema, environment/executor settings, these settings), so TRL and verl runs of one spec share the same weights.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from twinrun.core.errors import TwinrunError
from twinrun.models.tiny import TINY_QWEN3, build_tiny_qwen3, local_or_hub
# the training loop and probe live in warmstart_sft.py; tests and callers name them here too
from twinrun.models.warmstart_sft import (  # noqa: F401  (re-exported)
    WarmStartSettings,
    probe,
    receptive_field,
    sft,
    tokenize_conversation,
    turn_windows,
)

WARMSTART_VERSION = 4

# group steps far from any training step, so warm-start transcripts never replay a training task group
_TRANSCRIPT_STEP0 = 10_000_000


FINAL_REPLY = "Done."


# Skill bodies the warm start writes, of varied relevance to an ALFWorld task type under the scripted stand-in's
# skill_effect rule (twinrun.core.executors.skill_effect): for pick, the second scores 1, the third 0.55, the first
# and last 0.25; for look, the third scores 1, the second 0.55. The curator's first samples then differ in what
# they write and in the reward that follows, so GRPO has a signal to follow (issue 17).
SKILL_BODIES = (
    "Check every receptacle.",
    "Take the object, then put it in the target.",
    "Take the object and use the lamp.",
    "Open drawers and look around.",
)


# A warm-start skill's description names its type and the verb of that type's ALFWorld goals ("put some cd on
# shelf", "look at alarmclock under the desklamp", "examine the book with the desklamp"): BM25 retrieves a skill only
# for a game whose goal shares a term with it, and "pick tasks" shares none with a pick goal, so without the verb most
# inserts never reach the executor (issue 17: in the first learning check, 1 rollout in 16 retrieved anything). Two
# tokens longer, no other type's name (the stand-in's type credit reads the description), and the longest taught
# turn stays under the smoke arm's 96 response tokens.
TASK_VERBS = {"pick": "put", "pick2": "put", "look": "examine", "clean": "put", "heat": "put", "cool": "put"}


def _description(task_type: str) -> str:
    verb = TASK_VERBS.get(task_type)
    return f"{task_type} and {verb} tasks" if verb else f"{task_type} tasks"


def _op_templates(task_type: str, exists: bool = False) -> list[list[dict[str, Any]]]:
    """The small, regular set of curator turns the warm start teaches: short calls a 64-wide model can learn
    in a few hundred steps, with writes of varied relevance (:data:`SKILL_BODIES`) and calls that fail (deleting a
    missing skill), so GRPO has choices to tell apart.

    ``exists``: whether the repository already holds this type's skill at this turn. Then the writes are
    ``skill_update``s of it, not inserts: an insert of an existing name is invalid, so a warm start that taught
    inserts at every position left delete as the only valid call after position 1. The paper's r_fc pays a valid
    call 1/|G| whatever it does, and a delete also takes the skill from the next episode: in the first learning
    checks GRPO followed r_fc to deletes at positions 2..|G|, which spread to position 1 (31% of its turns by
    step 25, each one an invalid call on an empty repository, issue 17)."""
    name = f"{task_type}-tips"
    writes = []
    for body in SKILL_BODIES:
        content = f"---\nname: {name}\ndescription: {_description(task_type)}\n---\n{body}\n"
        writes.append([{"function": "skill_update", "arguments": {"skill_name": name, "new_content": content}}]
                      if exists else
                      [{"function": "new_skill_insert", "arguments": {"skill_name": name, "content": content}}])
    return [[], *writes, [{"function": "skill_delete", "arguments": {"skill_name": name}}]]


def _skill_present(ops: Sequence[Sequence[dict[str, Any]]]) -> list[bool]:
    """Before each position's turn of a taught plan, whether the type's skill is in the repository (the plans
    touch only that one name: an insert adds it, a delete removes it, an update keeps it)."""
    present, out = False, []
    for turn in ops:
        out.append(present)
        for op in turn:
            present = {"new_skill_insert": True, "skill_delete": False}.get(op["function"], present)
    return out


def _draw_plan(task_type: str, n: int, rng: random.Random) -> list[list[dict[str, Any]]]:
    """n turns drawn one after another, each from the templates that fit the repository the earlier ones left."""
    plan: list[list[dict[str, Any]]] = []
    for _ in range(n):
        plan.append(rng.choice(_op_templates(task_type, exists=_skill_present([*plan, []])[-1])))
    return plan


def warm_start_key(spec: Any, base: Path, settings: WarmStartSettings) -> str:
    from twinrun.core.curation.toolcalls import CURATE_TOOL

    blob = json.dumps(
        {
            "version": WARMSTART_VERSION,
            "base": base.name,
            "system": spec.read_prompt("curator_system"),
            "input": spec.read_prompt("curator_input"),
            "executor_system": spec.read_prompt("executor_system"),
            "executor_input": spec.read_prompt("executor_input"),
            "tool": CURATE_TOOL,
            "environment": spec.environment.model_dump(mode="json", exclude={"workers"}),
            # where the endpoint listens (a test server's port) is not what it is: the model name says that
            # self_judge_error is left out: transcripts are recorded without it (see record_transcripts)
            "executor": spec.executor.model_dump(mode="json", exclude={"concurrency", "timeout_s", "retries", "base_url",
                                                                       "api_key_env", "self_judge_error"}),
            "retrieval": spec.retrieval.model_dump(mode="json"),
            "skills": spec.skills.model_dump(mode="json"),
            "seed": spec.seed,
            "settings": asdict(settings),
            # the shape of the taught turns' prompts (per_position rows or one accumulated conversation)
            "context": [spec.curator.context, spec.curator.history],
            "ops": [_op_templates("<type>"), _op_templates("<type>", exists=True)],
            "verbs": TASK_VERBS,
            "final": final_tool_result(spec.environment.group_size),
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def resolve_curator_model(
    spec: Any,
    cache_dir: str | Path | None,
    *,
    data_root: str | Path | None = None,
    environ: Mapping[str, str] | None = None,
    settings: WarmStartSettings | None = None,
    log: Callable[[str], None] | None = None,
) -> str:
    """What ``from_pretrained`` should load for ``spec.curator.model``: the warm-started tiny model for
    ``tiny-qwen3`` (built and cached under ``cache_dir``), else the name itself (a hub id, or a local folder made
    absolute for verl's child and Ray workers, which run in other working directories)."""
    if spec.curator.model != TINY_QWEN3:
        return local_or_hub(spec.curator.model)
    if cache_dir is None:
        raise TwinrunError(
            f"curator.model: {TINY_QWEN3!r} is built locally and needs a cache folder (fix: pass --cache DIR or set TWINRUN_CACHE)"
        )
    return str(warm_started_tiny_curator(spec, cache_dir, data_root=data_root, environ=environ,
                                         settings=settings, log=log))


def warm_started_tiny_curator(
    spec: Any,
    cache_dir: str | Path,
    *,
    data_root: str | Path | None = None,
    environ: Mapping[str, str] | None = None,
    settings: WarmStartSettings | None = None,
    log: Callable[[str], None] | None = None,
    shape: Mapping[str, Any] | None = None,
) -> Path:
    """Build (or reuse) the warm-started tiny curator for ``spec`` under ``cache_dir``; return its folder.
    ``shape``: :func:`build_tiny_qwen3` arguments of another base model (e.g. :data:`twinrun.models.tiny.VLLM_SHAPE`);
    the base's folder name is part of the cache key, so each shape has its own warm start."""
    settings = settings or WarmStartSettings()
    say = log or (lambda _m: None)
    cache = Path(cache_dir)
    base = build_tiny_qwen3(cache, **dict(shape or {}))
    final = cache / f"{TINY_QWEN3}-warm-{warm_start_key(spec, base, settings)}"
    if (final / ".complete").is_file():
        return final
    t0 = time.perf_counter()
    recorded = cached_transcripts(spec, base, settings, final.with_name(final.name + ".transcripts.json"),
                                  data_root=data_root, environ=environ, say=say)
    t_rec = time.perf_counter() - t0
    transcripts, held_out = recorded[: settings.transcripts], recorded[settings.transcripts:]
    system = _system_prompt(spec)
    shape = {"context": spec.curator.context, "history": spec.curator.history}
    conversations = build_conversations(transcripts, system, settings, **shape)
    probes = probe_prompts(held_out, system, **shape)
    say(f"warm start: SFT {settings.steps} steps on {len(conversations)} {spec.curator.context} conversations")
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=cache))
    try:
        report = sft(base, conversations, settings, tmp, say=say, probes=probes)
        report.update(recording_s=round(t_rec, 3), transcripts=len(transcripts), base=base.name,
                      settings=asdict(settings), version=WARMSTART_VERSION, context=shape)
        (tmp / "warmstart.json").write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
        (tmp / ".complete").write_text("")
        try:
            os.replace(tmp, final)
        except OSError:
            if not (final / ".complete").is_file():
                shutil.rmtree(final, ignore_errors=True)
                os.replace(tmp, final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    say(f"warm start: done ({json.loads((final / 'warmstart.json').read_text())['probe_parse_rate']:.0%} of the turns "
        "sampled on held-out inputs are parseable curate calls)")
    return final


def _system_prompt(spec: Any) -> str:
    from twinrun.core.curation import CuratorPrompts

    return CuratorPrompts.from_files(spec.prompt_path("curator_system"), spec.prompt_path("curator_input")).system


# ------------------------------------------------------------------------------------------------------------
# Data: real transcripts, then conversations


@dataclass
class Transcript:
    task_type: str
    inputs: list[str]  # chi_1 .. chi_|G| as the real session produced them
    ops: list[list[dict[str, Any]]]  # the operations submitted at each position


def cached_transcripts(
    spec: Any, base: Path, settings: WarmStartSettings, path: Path, *, data_root: Any, environ: Any,
    say: Callable[[str], None],
) -> list[Transcript]:
    """Transcripts from ``path`` if a previous (interrupted) warm start recorded them, else record and save."""
    from twinrun.core.records import atomic_write_json

    if path.is_file():
        return [Transcript(**t) for t in json.loads(path.read_text(encoding="utf-8"))]
    say(f"warm start: recording {settings.transcripts} + {settings.probe_transcripts} (held out for the probe) "
        f"curation transcripts ({spec.environment.name}, |G|={spec.environment.group_size})")
    transcripts = record_transcripts(spec, base, settings, data_root=data_root, environ=environ)
    atomic_write_json(path, [asdict(t) for t in transcripts])
    return transcripts


def record_transcripts(
    spec: Any,
    base: Path,
    settings: WarmStartSettings,
    *,
    data_root: str | Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> list[Transcript]:
    """Play ``settings.transcripts + settings.probe_transcripts`` real curation sessions (concurrently) with
    scripted ``curate`` turns; a session in which no episode ran (infrastructure) is replaced by another, up to
    three times as many sessions in all."""
    import asyncio

    from transformers import AutoTokenizer

    from twinrun.core.curation import CurationRuntime, TaskGroup
    from twinrun.core.rewards.composite import token_counter

    tok = AutoTokenizer.from_pretrained(base)
    # the sessions are played with the scripted self-judge's error off: the warm start teaches the call format, and
    # a seeded share of flipped Result words changed what it was taught without changing what it should learn (with
    # the smoke arm's self_judge_error 0.2 its held-out parse rate fell from 92% to 69%, and in the demo's first
    # TRL run no curator call was valid). The RL rollouts read the spec's judged signal as before.
    if spec.executor.self_judge_error:
        spec = spec.model_copy(update={"executor": spec.executor.model_copy(update={"self_judge_error": 0.0})})
    runtime = CurationRuntime.from_spec(spec, data_root=data_root, environ=environ, count_tokens=token_counter(tok),
                                        judge=None)
    needed = settings.transcripts + settings.probe_transcripts
    try:
        rng = random.Random(settings.seed)

        def drawn(k: int) -> tuple[TaskGroup, list[list[dict[str, Any]]]]:
            group = runtime.task_group(_TRANSCRIPT_STEP0 + k, k % spec.batch.groups_per_step)
            return group, _draw_plan(group.task_type, len(group.games), rng)

        async def one(group: TaskGroup, plan: list[list[dict[str, Any]]]) -> Transcript | None:
            s = runtime.session(group, rollout_index=0)
            inputs = [await s.astart()]
            for ops in plan:
                nxt = await s.asubmit([{"name": "curate", "arguments": {"operations": ops}}])
                if nxt is None:
                    break
                inputs.append(nxt)
            result = await s.afinish()
            # a session none of whose episodes ran (dead env workers, an unreachable executor) holds only inputs
            # saying "the executor could not be run": dropped. Some unmeasured episodes are kept: a flaky executor
            # gives the RL curator such inputs too
            dead = all(p.outcome == "unmeasured" for p in result.record.positions)
            return None if dead else Transcript(group.task_type, inputs, plan)

        async def batch(ks: range) -> list[Transcript | None]:
            sessions = [drawn(k) for k in ks]  # drawn in order: the same plans whatever ran concurrently
            return list(await asyncio.gather(*(one(g, plan) for g, plan in sessions)))

        kept: list[Transcript] = []
        tried = 0
        while len(kept) < needed and tried < 3 * needed:  # sessions in which nothing ran are replaced
            ks = range(tried, tried + min(needed - len(kept), 3 * needed - tried))
            kept += [t for t in runtime.loop.run(batch(ks)) if t is not None]
            tried = ks.stop
        if len(kept) < needed:
            raise TwinrunError(
                f"warm start: only {len(kept)} of {tried} recorded curation sessions had an episode that ran, "
                f"{needed} are needed: the environment or executor keeps failing (fix: check the environment "
                "workers, $ALFWORLD_DATA and the executor endpoint, then rerun; nothing was cached)")
        return kept[:needed]
    finally:
        runtime.close()


def final_tool_result(group_size: int) -> str:
    """The tool result after the last position's curate call (nothing left to play)."""
    return f"All {group_size} tasks of this group have been played; the skill repository is final. Reply {FINAL_REPLY!r}."


def call_message(ops: list[dict[str, Any]]) -> dict[str, Any]:
    """The assistant message of one taught curator turn: a single ``curate`` call."""
    from twinrun.core.curation.toolcalls import CURATE

    return {"role": "assistant", "content": "",
            "tool_calls": [{"type": "function", "function": {"name": CURATE, "arguments": {"operations": ops}}}]}


def call_text(ops: list[dict[str, Any]]) -> str:
    """A taught turn as the text a backend decodes from it (the empty think block, then core's Hermes text of the
    call): per_position history turns are prompt-only messages holding that text."""
    from twinrun.core.curation.toolcalls import format_curate_call

    return "<think>\n\n</think>\n\n" + format_curate_call(ops)


def build_conversations(transcripts: Sequence[Transcript], system: str, settings: WarmStartSettings, *,
                        context: str = "accumulated", history: int = 0) -> list[list[dict]]:
    """The SFT conversations, in the spec's context shape (what the RL rollouts' prompts look like):

    * accumulated: one per conversation drawn: system, chi_1, then curate call / tool result pairs, then the
      final reply;
    * per_position: one per (conversation drawn, position): core's per_position prompt of that position
      (:func:`~twinrun.core.curation.context_shape.position_messages`: system, the last ``history`` earlier (input, turn)
      pairs, chi_i), then the curate call. Teaching the accumulated shape to a per_position curator left it
      facing a prompt it never saw at every position after the first.
    """
    from twinrun.core.curation.context_shape import HistoryTurn, history_window, position_messages

    if not transcripts:
        raise TwinrunError("warm start: no transcripts were recorded (fix: check the environment data)")
    rng = random.Random(settings.seed + 1)
    out: list[list[dict]] = []
    for c in range(settings.conversations):
        t = transcripts[c % len(transcripts)]
        # the first pass over the transcripts keeps the ops that really produced them; later passes re-draw each
        # turn from the templates that fit the repository the recorded inputs show (the recorded plan's)
        plan = t.ops if c < len(transcripts) else [rng.choice(_op_templates(t.task_type, exists=e))
                                                   for e in _skill_present(t.ops)]
        plan = plan[: len(t.inputs)]
        if context == "per_position":
            done: list[HistoryTurn] = []
            for chi, ops in zip(t.inputs, plan, strict=False):
                out.append([*position_messages(system, chi, history_window(done, history)), call_message(ops)])
                done.append(HistoryTurn(chi, call_text(ops)))
            continue
        msgs: list[dict[str, Any]] = [{"role": "system", "content": system}, {"role": "user", "content": t.inputs[0]}]
        for i, ops in enumerate(plan):
            msgs.append(call_message(ops))
            result = t.inputs[i + 1] if i + 1 < len(t.inputs) else final_tool_result(len(t.inputs))
            msgs.append({"role": "tool", "name": "curate", "content": result})
        msgs.append({"role": "assistant", "content": FINAL_REPLY})
        out.append(msgs)
    return out


def probe_prompts(transcripts: Sequence[Transcript], system: str, *, context: str = "accumulated",
                  history: int = 0) -> list[list[dict]]:
    """The prompts the probe samples turns on: every position of the held-out transcripts, in the spec's shape
    (accumulated: the conversation up to that position's input, tool results as the frameworks' tool loops
    append them)."""
    prompts = []
    for conv in build_conversations(transcripts, system, WarmStartSettings(conversations=len(transcripts)),
                                    context=context, history=history) if transcripts else []:
        if context == "per_position":
            prompts.append(conv[:-1])
        else:
            prompts += [conv[:k] for k in range(2, len(conv) - 2, 2)]
    return prompts
