"""The vLLM tests' shared pieces: the vLLM-servable tiny curator (:data:`twinrun.models.tiny.VLLM_SHAPE`), a
curator input, and a liveness check for the engine processes a test must leave gone."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def vllm_curator(cache_dir: Path) -> Path:
    """The tiny curator on the vLLM shape (head_dim 32, full attention), random weights: what the tests compare
    (vLLM against transformers on the same weights) needs no warm start, and a random model's next-token
    distributions are wide, which the sampling test wants."""
    from twinrun.models.tiny import VLLM_SHAPE, build_tiny_qwen3

    return build_tiny_qwen3(cache_dir, **VLLM_SHAPE)


CHI = ("Task group: pick. Previous task: put a clean apple in fridge. Outcome: failure. Steps: 12.\n"
       "Action 1: go to countertop 1\nObservation 1: On the countertop 1, you see a apple 1, a bread 1, a mug 2.\n"
       "Action 2: take apple 1 from countertop 1\nObservation 2: You pick up the apple 1 from the countertop 1.\n"
       "Skill repository: no skills yet. Update the skill repository so that the executor succeeds on the next task.")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead, only not yet reaped
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def left_alive(pids, wait_s: float = 20.0) -> list[int]:
    """The pids still alive after up to ``wait_s`` (a SIGKILLed process takes a moment to exit)."""
    import time

    deadline = time.monotonic() + wait_s
    while True:
        left = [p for p in pids if alive(p)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)
