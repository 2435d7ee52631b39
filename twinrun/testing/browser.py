"""Headless Chromium for the report's browser test (issue 52): the page's DOM after its scripts ran, and a
screenshot of its first screen. Debian's chromium (``apt-get install chromium chromium-driver``; `.ci/run` installs
it). The flags keep it off the network: this machine refuses outside connections, and without them Chromium tries
many at every start."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
         "--force-device-scale-factor=1")


def chromium() -> str | None:
    """The Chromium executable on PATH, or None."""
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _run(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    exe = chromium()
    if exe is None:
        raise RuntimeError("chromium: not on PATH (fix: apt-get install -y chromium chromium-driver)")
    with tempfile.TemporaryDirectory(prefix="twinrun-chromium-") as profile:
        got = subprocess.run([exe, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True, text=True,
                             timeout=timeout)
    if got.returncode != 0:
        raise RuntimeError(f"chromium {' '.join(args[:2])}: exit {got.returncode}: {got.stderr[-800:]}")
    return got


def dump_dom(page: Path, width: int = 1280, height: int = 800, timeout: float = 120) -> str:
    """The page's DOM, serialised after load (its scripts included), in a window of `width` x `height`."""
    return _run([f"--window-size={width},{height}", "--virtual-time-budget=3000", "--dump-dom",
                 page.resolve().as_uri()], timeout).stdout


def screenshot(page: Path, png: Path, width: int = 1280, height: int = 800, timeout: float = 120) -> Path:
    """A PNG of the first `width` x `height` pixels of the page, as a laptop's window shows it."""
    _run([f"--window-size={width},{height}", f"--screenshot={png.resolve()}", page.resolve().as_uri()], timeout)
    return png
