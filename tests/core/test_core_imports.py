"""docs/design.md: core never imports trl, verl, ray, vllm or torch at module level."""

from __future__ import annotations

import subprocess
import sys

FRAMEWORKS = ("torch", "trl", "verl", "ray", "vllm", "transformers", "deepspeed")


def test_every_core_module_imports_without_frameworks():
    code = f"""
import importlib, pkgutil, sys
import twinrun.core as core
names = [m.name for m in pkgutil.walk_packages(core.__path__, 'twinrun.core.')]
for n in names:
    importlib.import_module(n)
import twinrun.app.plan, twinrun.cli, twinrun.backends.registry
import twinrun.backends.trl.compile, twinrun.backends.verl.compile
loaded = [m for m in {FRAMEWORKS!r} if m in sys.modules]
print(len(names), loaded)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    n, loaded = out.stdout.strip().split(" ", 1)
    assert int(n) >= 3
    assert loaded == "[]", f"core pulled in a framework at import time: {loaded}"


def test_backends_never_import_each_other(repo_root):
    """docs/design.md: a backend imports core and its own framework, never the other backend (shared rules live in
    core, e.g. core.policy_input.segment_positions). Checked on the source text, so a lazy import counts too."""
    import re

    for name, other in (("trl", "verl"), ("verl", "trl")):
        pattern = re.compile(rf"^\s*(from|import)\s+twinrun\.backends\.{other}\b", re.MULTILINE)
        for path in (repo_root / "twinrun" / "backends" / name).rglob("*.py"):
            hit = pattern.search(path.read_text(encoding="utf-8"))
            assert hit is None, f"{path.relative_to(repo_root)} imports the {other} backend: {hit.group(0).strip()}"
