"""What the sweep benches share (bench/sweep_throughput.py, bench/vllm_sweep.py): their options, the environment,
one checkpoint of a random tiny Qwen3 as a run folder, and a sweep spec whose only real cost is the curator (the
executor an OpenAI-compatible server on loopback answering at once, the null environment)."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ANSWER = "<think>looking around</think>\n<action>look</action>"  # the executor's every turn
REPO = Path(__file__).resolve().parents[1]
SPEC = REPO / "experiments" / "smoke-cpu.yaml"


def options(doc: str, streams: str, streams_help: str) -> argparse.Namespace:
    """--streams (as given: each bench reads its own form), --games, --tokens, --cache, parsed."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--streams", default=streams, help=streams_help)
    ap.add_argument("--games", type=int, default=4, help="games per stream")
    ap.add_argument("--tokens", type=int, default=128, help="curator.max_response_tokens")
    ap.add_argument("--cache", type=Path, default=None, help="tiny-model cache folder (default: a temp folder)")
    return ap.parse_args()


def environment() -> None:
    """Offline, quiet tokenizers, and this checkout's twinrun first: here and in every process a sweep launches
    (a curator server, an environment worker), which would otherwise import the installed one."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.path.insert(0, str(REPO))
    os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])


def one_checkpoint(prefix: str, cache: Path | None, **shape: Any) -> tuple[Path, Path, Path]:
    """(temp folder, model cache, run folder ``b`` whose step 1 is the tiny Qwen3 of ``shape``)."""
    from twinrun.models import build_tiny_qwen3

    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    cache = cache or tmp / "cache"
    run = tmp / "b"
    shutil.copytree(build_tiny_qwen3(cache, **shape), run / "checkpoints" / "step-000001")
    return tmp, cache, run


def curator_spec(base_url: str, streams: int, tokens: int, *, batch: bool, more: tuple[str, ...] = ()) -> Any:
    """The smoke spec with the null environment and the loopback executor: the curator is what a sweep costs."""
    from twinrun.core.spec import load_spec

    return load_spec(SPEC, [
        "environment.name=null_env", "environment.task_types=null", "environment.workers=1",
        "executor.kind=openai", "executor.skill_effect=0", f"executor.base_url={base_url}", "executor.model=bench",
        "executor.retries=0", "executor.max_turns=8", "executor.self_judge_error=0", "curation.correctness=ground_truth",
        "curation.sweep_correctness=ground_truth", f"curator.max_response_tokens={tokens}", f"sweep.streams={streams}",
        f"sweep.batch_streams={str(batch).lower()}", *more])


def sweep_once(spec: Any, run: Path, out: Path, factory: Any, games: int, streams: int) -> float:
    """Wall seconds of one sweep of the run's checkpoint: its ``streams`` arms, no baseline."""
    from twinrun.core.sweeps import sweep as sw

    arms = [sw.arm_name("b", 1, r) for r in range(streams)]
    t0 = time.perf_counter()
    sw.sweep(spec, {"b": run}, out, n_games=games, progress=False, arms=arms, environ={}, policy_factory=factory)
    return time.perf_counter() - t0
