"""The vLLM tests' shared pieces: the vLLM-servable tiny curator (:data:`twinrun.models.tiny.VLLM_SHAPE`,
warm-started as the smoke arm's is), and the rule that every engine a test starts is gone when it ends."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def vllm_curator(cache_dir: Path, alfworld_data: Path, smoke_spec_path: Path) -> Path:
    """The smoke arm's warm start on the vLLM shape (head_dim 32, full attention): built once per cache."""
    from twinrun.core.spec import load_spec
    from twinrun.models.tiny import VLLM_SHAPE
    from twinrun.models.warmstart import warm_started_tiny_curator

    return warm_started_tiny_curator(load_spec(smoke_spec_path), cache_dir, data_root=alfworld_data, shape=VLLM_SHAPE)


def transcripts_of(curator: Path) -> list[dict]:
    """The real curation transcripts the warm start recorded beside the curator (real chi_i inputs)."""
    import json

    return json.loads(Path(str(curator) + ".transcripts.json").read_text())


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead, only not yet reaped
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False
