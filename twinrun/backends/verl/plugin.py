"""The `verl.plugins` entry point: verl imports this module on `import verl`, in every process of a run.

It registers, in verl's own registries:
1. core's advantage estimators (``twinrun_grpo``, ``twinrun_dr_grpo``, ``twinrun_rloo``, ``twinrun_gigpo``);
2. the curator agent loop (``twinrun_curator``) and the trainer that counts mini-batches in rows
   (``twinrun_rows``, rows_trainer.py);
3. the transformers rollout (rollout ``hf``, mode ``async``, and its ``RolloutReplica``);
4. the ``cpu`` platform, and, when ``VERL_PLATFORM=cpu``, the two CPU fixes (`cpu_platform.py`) and, inside
   verl's vLLM engine, the fix that lets it load the actor's weights every step (`vllm_cpu.py`);
5. one environment fix: verl's FSDP engine patches TRL's ``AutoModelForCausalLMWithValueHead`` whenever *any* trl
   is installed (`verl.models.transformers.monkey_patch`), and trl 1.16 (which twinrun's TRL backend pins in the
   same environment) no longer has that class: ``ImportError: cannot import name
   'AutoModelForCausalLMWithValueHead' from 'trl'`` on every model build. verl's "is trl available" check is
   narrowed to "does the installed trl have that class", which is what the patch it guards needs.

verl swallows a plugin's import error at DEBUG level, so a broken registration would surface much later as
"unknown estimator"; tests assert the registries directly (tests/backends/test_verl_plugin.py) and
`register_all` is also callable explicitly (train.py does, so an error there is loud).
"""

from __future__ import annotations

from twinrun.backends.verl.names import AGENT_LOOP_CLASS, AGENT_LOOP_NAME


def register_rollout() -> None:
    from verl.workers.rollout.base import _ROLLOUT_REGISTRY
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    from twinrun.backends.verl import hf_rollout

    _ROLLOUT_REGISTRY[(hf_rollout.ROLLOUT_NAME, "async")] = hf_rollout.ROLLOUT_CLASS
    RolloutReplicaRegistry.register(hf_rollout.ROLLOUT_NAME, hf_rollout.load_replica)


def register_agent_loop() -> None:
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry

    # the registry maps a name to a hydra target; the class is imported when a worker instantiates it
    _agent_loop_registry[AGENT_LOOP_NAME] = {"_target_": AGENT_LOOP_CLASS}


def _trl_has_value_head() -> bool:
    """True when the installed trl still ships AutoModelForCausalLMWithValueHead (checked without importing trl)."""
    import importlib.util
    from pathlib import Path

    try:
        spec = importlib.util.find_spec("trl")
    except (ImportError, ValueError):
        return False
    if spec is None or not spec.origin:
        return False
    root = Path(spec.origin).parent
    if (root / "experimental" / "ppo").is_dir():
        return True
    try:
        return "AutoModelForCausalLMWithValueHead" in (root / "__init__.py").read_text(encoding="utf-8")
    except OSError:
        return False


def narrow_trl_check() -> None:
    import sys

    import verl.utils.import_utils as import_utils

    if getattr(import_utils.is_trl_available, "_twinrun", False):
        return

    def is_trl_available() -> bool:
        return _trl_has_value_head()

    is_trl_available._twinrun = True  # type: ignore[attr-defined]
    import_utils.is_trl_available = is_trl_available
    for name in ("verl.models.transformers.monkey_patch", "verl.utils.model"):  # bound by name if already imported
        module = sys.modules.get(name)
        if module is not None and hasattr(module, "is_trl_available"):
            module.is_trl_available = is_trl_available


def register_all() -> None:
    from twinrun.backends.verl import cpu_platform, vllm_cpu
    from twinrun.backends.verl.estimators import register_estimators

    narrow_trl_check()
    cpu_platform.register_platform()
    if cpu_platform.cpu_requested():
        cpu_platform.apply_cpu_fixes()
        # inside verl's vLLM engine on CPU only (the engine's processes inherit VERL_PLATFORM from verl's child): a
        # vLLM engine of another framework in this process (TRL's colocate) does not re-pack after its syncs
        vllm_cpu.keep_linear_weights()
    register_estimators()
    register_rollout()
    register_agent_loop()
    register_trainer()


def register_trainer() -> None:
    """The sync v1 trainer that counts mini-batches in rows (``trainer.v1.trainer_mode=twinrun_rows``)."""
    from twinrun.backends.verl.rows_trainer import register_rows_trainer

    register_rows_trainer()


register_all()
