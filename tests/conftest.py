"""Test-wide environment: no hub, no Ray auth token, the ALFWorld games.

The games come from ALFWORLD_DATA (`.ci/run` sets it to the test games), else from ~/.cache/alfworld where
`alfworld-download` writes them; they are read from there, never copied into the repository.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOWNLOADED_ALFWORLD = Path("~/.cache/alfworld").expanduser()  # alfworld-download's folder (alfworld/info.py)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("WANDB_MODE", "disabled")
if "ALFWORLD_DATA" not in os.environ and (DOWNLOADED_ALFWORLD / "json_2.1.1").is_dir():
    os.environ["ALFWORLD_DATA"] = str(DOWNLOADED_ALFWORLD)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


NO_ALFWORLD = "ALFWORLD_DATA with json_2.1.1/ not found"
ALFWORLD_FIX = ("fix: export ALFWORLD_DATA=<folder holding json_2.1.1/>, or run `alfworld-download` "
                "(it writes ~/.cache/alfworld)")


def _alfworld_missing() -> bool:
    p = os.environ.get("ALFWORLD_DATA")
    return not p or not Path(p, "json_2.1.1").is_dir()


def _needs_alfworld(item: pytest.Item) -> bool:
    return "alfworld_data" in getattr(item, "fixturenames", ()) or item.get_closest_marker("alfworld") is not None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under CI (CI=true) a missing ALFWorld data folder fails the run at once, in one line: there the end-to-end,
    fault-injection, kill -9 and curation tests must run, not be skipped."""
    if os.environ.get("CI", "").lower() in ("true", "1") and _alfworld_missing():
        need = sum(_needs_alfworld(i) for i in items)
        if need:
            raise pytest.UsageError(f"CI=true: {NO_ALFWORLD} (ALFWORLD_DATA={os.environ.get('ALFWORLD_DATA')!r}); "
                                    f"{need} collected tests need it ({ALFWORLD_FIX})")


def pytest_unconfigure(config: pytest.Config) -> None:
    """For a user without the games, the run ends with one line saying what was skipped and why (exit 0)."""
    terminalreporter = config.pluginmanager.get_plugin("terminalreporter")
    if terminalreporter is None:
        return
    skipped = [r for r in terminalreporter.stats.get("skipped", [])
               if isinstance(r.longrepr, tuple) and NO_ALFWORLD in str(r.longrepr[2])]
    if skipped:
        terminalreporter.write_line(
            f"twinrun: {len(skipped)} tests skipped without ALFWorld games (the end-to-end, fault-injection, kill -9 "
            f"and curation tests): {NO_ALFWORLD} ({ALFWORLD_FIX})", yellow=True)


@pytest.fixture(scope="session")
def alfworld_data() -> Path:
    if _alfworld_missing():
        pytest.skip(NO_ALFWORLD)
    return Path(os.environ["ALFWORLD_DATA"])


@pytest.fixture(scope="session")
def smoke_spec_path() -> Path:
    return REPO / "experiments" / "smoke-cpu.yaml"


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    """Tiny model + warm-start cache shared by every test of the session, so the warm start is built once for
    both backends' training tests. TWINRUN_TEST_CACHE keeps it between sessions (optional)."""
    keep = os.environ.get("TWINRUN_TEST_CACHE")
    return Path(keep) if keep else tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="session")
def controls_sweep(tmp_path_factory) -> Path:
    """The controls' committed rows (experiments/controls/data/rows.jsonl.gz) rebuilt once per session as the sweep
    folder they were compacted from (sweep.json, arms/, metrics/), for the tests that read a folder."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("controls_rows", REPO / "experiments" / "controls" / "rows.py")
    rows = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rows)
    return rows.unpack(tmp_path_factory.mktemp("controls") / "sweep")
