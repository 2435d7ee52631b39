"""The teacher: an OpenAI-compatible endpoint that plays ScienceWorld training variations for SFT data, as the
published Qwen3-1.7B ScienceWorld study built its set (one episode per training variation, at most 30 replies,
teacher success 41.96%, nothing filtered or masked).

- **Which sampling parameters are sent** is ``sft.teacher.send`` (a spec field): reasoning models take
  ``reasoning_effort`` / ``max_completion_tokens`` and reject ``temperature`` / ``top_p`` / ``max_tokens``.
- **Probe first**: :func:`probe_teacher` sends one short request carrying exactly the configured parameters
  before any episode is played; a parameter the endpoint rejects is a one-line error naming it (read from the
  error's ``param`` field, else from its message, else found by sending each parameter alone).
- **Every episode is kept**, failed or not, with its rejected actions (the simulator's "No known action
  matches that input."), and every teacher reply is trained: the reply's *visible* text (a leading
  ``<think>...</think>`` block, which some servers leave in ``content``, is dropped; ``reasoning_content`` is
  never read). An episode whose endpoint or simulator failed is unmeasured: listed, not written, and played
  again by the next (resumed) run.
- **Resumable**: one JSON line per finished episode, flushed and fsynced; a rerun skips what is on file.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from twinrun.core.sft.agent_eval.episode import GenerateFn, episode_trajectory, play_react_episode
from twinrun.core.errors import InfrastructureError, TwinrunError
from twinrun.core.sft.template_copy import literal_copy_counts, prompt_action_list, template_copy_counts
from twinrun.core.sft.trajectories import TrajectoryRecord

TEACHER_RECORD_SUFFIX = "teacher"
REJECTED_OBSERVATION = "no known action matches"
_THINK_BLOCK = re.compile(r"^\s*<think>.*?</think>\s*", re.DOTALL | re.IGNORECASE)


def visible_reply(content: str) -> str:
    """The reply a user would see: a leading ``<think>...</think>`` block (or everything up to a lone closing
    ``</think>``) removed."""
    text = _THINK_BLOCK.sub("", content or "", count=1)
    low = text.lower()
    if "</think>" in low and "<think>" not in low:
        text = text[low.rindex("</think>") + len("</think>"):]
    return text.strip()


def sampling_fields(teacher: Any) -> dict[str, Any]:
    """The request fields ``sft.teacher.send`` selects (seed excluded: it varies per request)."""
    return {name: getattr(teacher, name) for name in teacher.send if name != "seed"}


def request_body(teacher: Any, model: str, messages: list[dict[str, Any]], seed: int | None) -> dict[str, Any]:
    """The JSON body of one teacher request: model, messages, the sent sampling fields, extra_body, seed if sent."""
    body: dict[str, Any] = {"model": model, "messages": messages, **sampling_fields(teacher), **teacher.extra_body}
    if "seed" in teacher.send and seed is not None:
        body["seed"] = int(seed)
    return body


# ------------------------------------------------------------------------------------------------------------
# Probe


_PROBE_MESSAGES = [{"role": "user", "content": "Reply with the single word: ready"}]


def probe_teacher(teacher: Any, *, base_url: str, model: str, api_key: str, timeout_s: float = 60.0) -> None:
    """One request with exactly the configured parameters. Raises a one-line :class:`TwinrunError` for a
    rejected parameter, a refused key or an unknown model, :class:`InfrastructureError` when the endpoint cannot
    be reached; returns quietly when the endpoint answers."""
    import httpx

    url = f"{base_url.rstrip('/')}/chat/completions"
    headers = {"Authorization": f"Bearer {api_key}"}

    def post(body: dict[str, Any]) -> tuple[int, dict[str, Any], str]:
        try:
            r = httpx.post(url, json=body, headers=headers, timeout=timeout_s)
        except httpx.HTTPError as e:
            raise InfrastructureError(f"sft.teacher.base_url: {base_url} cannot be reached ({type(e).__name__}: "
                                      f"{e})") from e
        try:
            payload = r.json()
        except ValueError:
            payload = {}
        return r.status_code, payload if isinstance(payload, dict) else {}, r.text

    body = request_body(teacher, model, _PROBE_MESSAGES, seed=0)
    status, payload, text = post(body)
    if status == 200:
        return
    err = payload.get("error") if isinstance(payload.get("error"), dict) else {}
    message = str(err.get("message") or text)[:200].replace("\n", " ")
    if status in (401, 403):
        raise TwinrunError(f"sft.teacher.api_key_env: the endpoint refused the key in ${teacher.api_key_env} "
                           f"(HTTP {status}: {message}) (fix: export a valid key in {teacher.api_key_env})")
    if status == 404:
        raise TwinrunError(f"sft.teacher.model: {model!r} is not served at {base_url} (HTTP 404: {message}) "
                           "(fix: --model with a name from the endpoint's /models)")
    if status >= 500:
        raise InfrastructureError(f"teacher probe: {base_url} answered HTTP {status}: {message}")
    sent = [*sampling_fields(teacher), *(["seed"] if "seed" in teacher.send else []), *teacher.extra_body]
    rejected = _rejected_params(err, message, sent)
    if not rejected:  # the error names nothing we sent: try each parameter alone
        for name in sent:
            alone = post({"model": model, "messages": _PROBE_MESSAGES, name: body[name]})[0]
            if 400 <= alone < 500 and alone not in (401, 403, 404):
                rejected.append(name)
    if rejected:
        name = rejected[0]
        where = "sft.teacher.extra_body" if name in teacher.extra_body else "sft.teacher.send"
        raise TwinrunError(
            f"{where}: the endpoint rejects {name!r} (HTTP {status}: {message}) (fix: drop {name!r} from {where}; "
            "reasoning models take reasoning_effort and max_completion_tokens instead of temperature/top_p/"
            "max_tokens)"
        )
    raise TwinrunError(f"teacher probe: HTTP {status}: {message} (fix: check sft.teacher against the endpoint)")


def _rejected_params(err: dict[str, Any], message: str, sent: Sequence[str]) -> list[str]:
    param = err.get("param")
    if isinstance(param, str) and param in sent:
        return [param]
    return [name for name in sent if re.search(rf"['\"`]?\b{re.escape(name)}\b['\"`]?", message)]


# ------------------------------------------------------------------------------------------------------------
# Generation


def teacher_generator(teacher: Any, *, base_url: str, model: str, api_key: str, loop: Any) -> GenerateFn:
    """``generate(messages, seed) -> visible reply`` through the executor's OpenAI client (retries, timeouts;
    a call that exhausts its retries raises :class:`InfrastructureError`: the episode is unmeasured)."""
    from twinrun.core.executors import OpenAIPolicy

    fields = sampling_fields(teacher)
    policy = OpenAIPolicy(
        base_url=base_url, model=model, api_key=api_key, temperature=fields.pop("temperature", None),
        top_p=fields.pop("top_p", None), max_tokens=fields.pop("max_tokens", None),
        extra_body={**fields, **teacher.extra_body}, timeout_s=teacher.timeout_s, retries=teacher.retries,
        concurrency=max(1, teacher.workers),
    )
    send_seed = "seed" in teacher.send

    def generate(messages: list[dict[str, Any]], seed: int) -> str:
        overrides = {"seed": int(seed)} if send_seed else {}
        return visible_reply(loop.run(policy.complete(messages, **overrides)))

    return generate


# ------------------------------------------------------------------------------------------------------------
# The dataset


def finished_ids(path: str | Path) -> set[str]:
    """Ids of the episodes already in a trajectory file (resume); a torn last line from a killed run is not one
    (the writer truncates it before appending)."""
    from twinrun.core.records import read_jsonl

    return {str(row.get("id")) for row in read_jsonl(path)}


def teacher_record_id(game: Any) -> str:
    return f"{game.env}/{game.game_id}/{TEACHER_RECORD_SUFFIX}"


def episode_counts(actions: Sequence[str | None], observations: Sequence[str], instruction: str,
                   literal: Sequence[str]) -> dict[str, int]:
    """Per-episode counts written into the record's meta (the stats read the turns, these are for a glance)."""
    return {
        "turns": len(actions),
        "literal_copies": literal_copy_counts(actions, literal)[0],
        "template_copies": template_copy_counts(actions, prompt_action_list(instruction))[0],
        "rejected_actions": sum(o.strip().lower().startswith(REJECTED_OBSERVATION) for o in observations),
    }


@dataclass
class TeacherBuildReport:
    written: int = 0
    skipped_existing: int = 0
    successes: int = 0
    turns: int = 0
    unmeasured: list[str] = field(default_factory=list)


def build_teacher_dataset(
    env_factory: Callable[[], Any],
    games: Iterable[Any],
    out_path: str | Path,
    generate: GenerateFn,
    *,
    teacher_name: str,
    max_turns: int,
    seed: int,
    instruction: str,
    literal: Sequence[str],
    workers: int = 1,
    settings_hash: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> TeacherBuildReport:
    """Play each game once with the teacher and append one trajectory per measured episode to ``out_path``.

    ``env_factory()`` makes a simulator (one per worker thread; each is shut down at the end). Episode seeds are
    ``hash(seed, game)`` (round r sends seed + r). Games already in the file are skipped (resume)."""
    from twinrun.core.sft.agent_eval.protocol import episode_seed
    from twinrun.core.records import JsonlWriter

    out = Path(out_path)
    done_ids = finished_ids(out)
    todo = []
    report = TeacherBuildReport()
    for g in games:
        if teacher_record_id(g) in done_ids:
            report.skipped_existing += 1
        else:
            todo.append(g)
    lock = threading.Lock()
    local = threading.local()
    envs: list[Any] = []
    t0 = time.monotonic()
    total = len(todo)

    def env() -> Any:
        if getattr(local, "env", None) is None:
            local.env = env_factory()
            with lock:
                envs.append(local.env)
        return local.env

    def play(game: Any) -> tuple[Any, TrajectoryRecord | None, str | None]:
        res = play_react_episode(env(), game, generate, instruction=instruction, max_rounds=max_turns,
                                 seed=episode_seed(seed, 0, game.game_id))
        if res.outcome == "unmeasured":
            return game, None, f"{game.game_id}: {res.unmeasured_reason}"
        counts = episode_counts(res.actions, res.observations, instruction, literal)
        rec = episode_trajectory(res, record_id=teacher_record_id(game), game=game, instruction=instruction,
                                 teacher=teacher_name, skill_condition=None,
                                 meta={**counts, "settings_hash": settings_hash, "wall_s": round(res.wall_s, 3)})
        return game, rec, None

    writer = JsonlWriter(out)
    try:
        with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="teacher") as pool:
            for n, (game, rec, why) in enumerate(pool.map(play, todo), 1):
                if rec is None:
                    report.unmeasured.append(why or game.game_id)
                    line = f"[{n}/{total}] {game.game_id}: unmeasured ({why})"
                else:
                    with lock:
                        writer.write(rec)
                    report.written += 1
                    report.successes += bool(rec.success)
                    report.turns += rec.meta["turns"]
                    line = (f"[{n}/{total}] {game.game_id}: {'success' if rec.success else 'failure'} "
                            f"score={rec.final_score:g} turns={rec.meta['turns']} "
                            f"copies={rec.meta['literal_copies']} rejected={rec.meta['rejected_actions']} "
                            f"({time.monotonic() - t0:.0f} s)")
                if progress:
                    progress(line)
    finally:
        writer.close()
        for e in envs:
            shutdown = getattr(e, "shutdown", None)
            if shutdown:
                shutdown()
    return report
