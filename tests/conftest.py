"""Test-wide environment: no hub, no Ray auth token, the shared ALFWorld games.

ALFWORLD_DATA points at ../shared/data/alfworld (real ALFWorld games laid out as `alfworld-download` would);
the files are read from there, never copied into the repository.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_ALFWORLD = REPO.parent / "shared" / "data" / "alfworld"

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("WANDB_MODE", "disabled")
if "ALFWORLD_DATA" not in os.environ and SHARED_ALFWORLD.is_dir():
    os.environ["ALFWORLD_DATA"] = str(SHARED_ALFWORLD)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def alfworld_data() -> Path:
    p = os.environ.get("ALFWORLD_DATA")
    if not p or not Path(p, "json_2.1.1").is_dir():
        pytest.skip("ALFWORLD_DATA with json_2.1.1/ not found (CI sets it to ../shared/data/alfworld)")
    return Path(p)


@pytest.fixture(scope="session")
def smoke_spec_path() -> Path:
    return REPO / "experiments" / "smoke-cpu.yaml"


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    """Tiny model + warm-start cache shared by every test of the session, so the warm start is built once for
    both backends' training tests. TWINRUN_TEST_CACHE keeps it between sessions (optional)."""
    keep = os.environ.get("TWINRUN_TEST_CACHE")
    return Path(keep) if keep else tmp_path_factory.mktemp("cache")
