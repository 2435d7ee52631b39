"""`twinrun plan` shows where each rollout knob's value comes from (spec line and its comment, --set, default),
and `--against OTHER_SPEC` puts another arm's per-step counts and differing fields beside the spec's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from twinrun.core.spec import load_spec
from twinrun.core.spec.origins import yaml_origins
from twinrun.app.plan import build_plan

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"
PAPER = EXPERIMENTS / "skillos-alfworld-qwen3-8b.yaml"
SMOKE = EXPERIMENTS / "smoke-cpu.yaml"

TEXT = """\
# header
version: 1
executor:
  kind: openai          # a vLLM server
  # two lines of
  # citation
  temperature: 0.6
  extra_body: {chat_template_kwargs: {enable_thinking: false}}   # Qwen3 flag
  url: "http://x/#not-a-comment"
retrieval:
  bm25:
    k1: 1.2
"""


def test_origins_read_lines_trailing_and_preceding_comments():
    o = yaml_origins(TEXT, ["retrieval.bm25.b=0.5"])
    assert o.of("executor.kind").source == "spec line 4" and o.of("executor.kind").note == "a vLLM server"
    assert o.of("executor.temperature").note == "two lines of citation"
    assert o.of("executor.extra_body").note == "Qwen3 flag"
    inner = o.of("executor.extra_body.chat_template_kwargs.enable_thinking")
    assert (inner.source, inner.note) == ("spec line 8", "Qwen3 flag")  # a one-line mapping shares its comment
    assert o.of("executor.url").note == ""  # a '#' inside a quoted value is not a comment
    assert o.of("retrieval.bm25.k1").source == "spec line 12"
    assert o.of("retrieval.bm25.b").source == "--set" and o.of("retrieval.bm25").source == "--set"
    assert o.of("executor.top_k").source == "default"
    assert yaml_origins("a: [unclosed").lines == {}


def test_rollout_knobs_carry_value_and_source():
    rows = {r["name"]: r for r in build_plan(load_spec(PAPER, ["retrieval.top_k=3"]))["rollout_knobs"]}
    temp = rows["executor.temperature"]
    line = PAPER.read_text().splitlines().index(next(x for x in PAPER.read_text().splitlines()
                                                      if x.startswith("  temperature: 0.4"))) + 1
    assert (temp["value"], temp["source"]) == (0.4, f"spec line {line}")
    assert temp["note"] == "GiGPO's setting; the paper does not print executor decoding"
    assert rows["retrieval.top_k"]["source"] == "--set" and rows["retrieval.top_k"]["value"] == 3
    assert rows["judge.api_key_env"]["source"] == "default"
    assert rows["executor.api_key_env"]["note"] == "environment variable holding the endpoint key"  # the default's meaning
    assert {n.split(".")[0] for n in rows} == {"executor", "judge", "retrieval"}


def test_plan_against_shows_both_arms_counts_and_every_differing_field():
    plan = build_plan(load_spec(SMOKE), other=load_spec(PAPER))
    a = plan["against"]
    assert a["spec"]["name"] == "skillos-alfworld-qwen3-8b"
    assert a["counts"]["this:trl"]["curation_trajectories"] == 4 and a["counts"]["other:verl"]["curation_trajectories"] == 256
    assert a["counts"]["other:trl"]["executor_calls_at_most"] == 2560 * 30
    diff = {d["name"]: d for d in a["differences"]}
    line = SMOKE.read_text().splitlines().index("  groups_per_step: 2") + 1
    assert diff["batch.groups_per_step"] == {"name": "batch.groups_per_step", "this": 2, "other": 32,
                                             "source": f"spec line {line}"}
    assert "name" not in diff and "seed" not in diff  # equal fields are not listed
    out = subprocess.run([sys.executable, "-m", "twinrun.cli", "plan", str(SMOKE), "--against", str(PAPER), "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["against"]["differences"] == a["differences"]
    text = subprocess.run([sys.executable, "-m", "twinrun.cli", "plan", str(SMOKE), "--against", str(PAPER)],
                          capture_output=True, text=True, timeout=120)
    assert text.returncode == 0 and "per-step counts: smoke-cpu (this) against skillos-alfworld-qwen3-8b" in text.stdout
