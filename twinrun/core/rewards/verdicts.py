"""What a content judge is asked and answers: the request, the three-state verdict (None = unmeasured), the judge's
settings for the records, the Judge protocol, the verdict cache, and the parser of a judge model's answer."""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from twinrun.core.errors import TwinrunError
from twinrun.core.records import JsonlWriter, read_jsonl
from twinrun.core.skills.skill_md import Skill


class JudgeError(TwinrunError, ValueError):
    """A judge that cannot be built from its configuration."""


@dataclass(frozen=True)
class JudgeRequest:
    """What the judge sees: the skill as written, and the curation context it was written in."""

    skill: Skill
    task: str = ""
    trajectory: str = ""
    # the correctness signal the curator saw: the judged "success" / "failure" / "unknown" under curation.correctness:
    # judged, the environment's outcome only under ground_truth ("unmeasured" when the executor failed)
    outcome: str = ""


@dataclass(frozen=True)
class Verdict:
    valid: bool | None  # None = unmeasured
    reason: str
    cached: bool = False

    @property
    def measured(self) -> bool:
        return self.valid is not None


@dataclass(frozen=True)
class JudgeSettings:
    """What decides a judge's verdicts, for the records: `sent` holds the request fields besides model and
    messages (empty for the rules judge); `settings_hash` is sha256[:16] of the kind, model, those fields and the
    prompt text (the rules judge: its thresholds). Timeout, retries and backoff are left out: they change when a
    verdict arrives, not what it says."""

    kind: str
    model: str | None
    sent: dict[str, Any]
    settings_hash: str


@runtime_checkable
class Judge(Protocol):
    name: str

    def judge(self, request: JudgeRequest) -> Verdict: ...

    async def ajudge(self, request: JudgeRequest) -> Verdict: ...


class VerdictCache:
    """content-hash -> measured verdict; thread-safe; optionally appended to a JSONL file and read back."""

    def __init__(self, path: str | Path | None = None):
        self._lock = threading.Lock()
        self._verdicts: dict[str, Verdict] = {}
        self._writer: JsonlWriter | None = None
        if path is not None:
            for row in read_jsonl(path):
                if isinstance(row.get("key"), str) and isinstance(row.get("valid"), bool):
                    self._verdicts[row["key"]] = Verdict(row["valid"], str(row.get("reason", "")))
            self._writer = JsonlWriter(path)

    def __len__(self) -> int:
        return len(self._verdicts)

    def get(self, key: str) -> Verdict | None:
        with self._lock:
            v = self._verdicts.get(key)
        return replace(v, cached=True) if v is not None else None

    def put(self, key: str, verdict: Verdict) -> None:
        if verdict.valid is None:
            return  # an unmeasured verdict is retried next time, never remembered
        with self._lock:
            if key in self._verdicts:
                return
            self._verdicts[key] = replace(verdict, cached=False)
            if self._writer is not None:
                self._writer.write({"key": key, "valid": verdict.valid, "reason": verdict.reason})

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


def _sha256(*parts: str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    return h.hexdigest()



# ------------------------------------------------------------------------------------------------------------
# Verdict parsing

_THINK_RE = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_TRUE = {"true", "valid", "yes", "1"}
_FALSE = {"false", "invalid", "no", "0"}


def _as_bool(v: Any) -> bool | None:
    if isinstance(v, bool):
        return v
    if isinstance(v, str):
        s = v.strip().lower()
        if s in _TRUE:
            return True
        if s in _FALSE:
            return False
    return None


def parse_judge_answer(text: str, key: str, yes: str, no: str) -> tuple[bool | None, str]:
    """(verdict, reason) from a judge model's answer; verdict None when nothing parses.

    Reads the last JSON object with a ``key`` key (any case; value true/false or yes/no words), after dropping
    ``<think>`` blocks; failing that, a last line that is exactly ``yes`` or ``no`` (e.g. VALID / INVALID).
    """
    if not isinstance(text, str):
        return None, "judge answer is not text"
    if "</think>" in text.lower():
        text = _THINK_RE.sub("", text)
        low = text.lower()
        if "</think>" in low:  # the opening tag was in the prompt (Qwen3 chat template): keep what follows
            text = text[low.rfind("</think>") + len("</think>") :]
    decoder = json.JSONDecoder()
    found: tuple[bool | None, str] | None = None
    for m in re.finditer(r"\{", text):
        try:
            obj, _ = decoder.raw_decode(text, m.start())
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            keys = {k.lower(): k for k in obj if isinstance(k, str)}
            if key.lower() in keys:
                verdict = _as_bool(obj[keys[key.lower()]])
                reason = obj.get(keys.get("reason", "reason"), "")
                found = (verdict, reason if isinstance(reason, str) else json.dumps(reason))
    if found is not None:
        if found[0] is None:
            return None, f"{key.upper()} is neither true nor false"
        return found
    lines = [ln.strip().strip("*`#.:").strip() for ln in text.strip().splitlines() if ln.strip()]
    if lines and lines[-1].upper() in (yes, no):
        return lines[-1].upper() == yes, "bare verdict"
    return None, f"no JSON verdict with a {key.upper()} key in the answer"


def parse_verdict(text: str) -> tuple[bool | None, str]:
    """The count judge's answer: a ``VALID`` key, or a bare VALID / INVALID last line."""
    return parse_judge_answer(text, "valid", "VALID", "INVALID")

