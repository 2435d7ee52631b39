"""`twinrun preflight SPEC --backend B`: one training step through the spec's exact configuration with the
curator cut to 2 layers (random weights from its own config, its own tokenizer), so a config error shows in
minutes instead of after the model loads on 16 GPUs. Everything but the depth, the weights, `steps`,
`checkpoint_every` and `curator.max_missing_turn_share` (1.0: random weights write no tool call) is the spec's (resources, batch, lengths, precision, overrides): plan's counts check, the
backend's up-front checks and its real trainer run as `twinrun train` runs them, and the step writes a checkpoint.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from twinrun.core.errors import TwinrunError

LAYERS = 2


def cut_model(model: str, folder: Path, *, layers: int = LAYERS, cache_dir: Path | None = None, seed: int = 0
              ) -> Path:
    """A random ``layers``-layer model of ``model``'s architecture (config from a local folder, the local HF
    cache, or tiny-qwen3's builder) with ``model``'s tokenizer, saved at ``folder``. Nothing is downloaded."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from twinrun.models.tiny import resolve_model

    source = resolve_model(model, cache_dir)
    local = Path(source).is_dir()
    try:
        config = AutoConfig.from_pretrained(source, local_files_only=not local)
        tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=not local)
    except (OSError, ValueError) as e:
        raise TwinrunError(f"curator.model: {model!r}'s config and tokenizer are not here ({type(e).__name__}) "
                           "(fix: download them, config and tokenizer files only, or give a local folder)") from None
    config.num_hidden_layers = layers
    for name in ("layer_types", "mlp_only_layers"):  # per-layer lists follow the depth
        value = getattr(config, name, None)
        if isinstance(value, list) and len(value) > layers:
            setattr(config, name, value[:layers])
    torch.manual_seed(seed)
    net = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    folder.mkdir(parents=True, exist_ok=True)
    net.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def preflight(load: Callable[[list[str]], Any], backend: str, out: Path, *, cache_dir: Path | None = None,
              log: Callable[[str], None] = print) -> dict[str, Any]:
    """Cut the spec's curator, run one step with ``backend`` into ``out`` (a fresh folder), return the trainer's
    summary and where the cut model is. ``load(extra_sets)`` loads the spec as `train` does (the command's --set
    options, then ``extra_sets``: curator.model, steps and checkpoint_every)."""
    from twinrun.app.plan import build_plan
    from twinrun.backends import registry

    spec = load([])
    if backend not in spec.backends:
        raise TwinrunError(f"--backend: {backend!r} is not in the spec's backends {spec.backends} (fix: add it there)")
    if out.exists() and any(out.iterdir()):
        raise TwinrunError(f"--out: {out} is not empty (fix: a new folder; preflight never overwrites)")
    model_dir = cut_model(spec.curator.model, out.resolve() / "cut-model", cache_dir=cache_dir, seed=spec.seed)
    # a random 2-layer curator never writes a tool call: the step must not stop on missing turns
    cut = load([f"curator.model={model_dir}", "steps=1", "checkpoint_every=1", "curator.max_missing_turn_share=1.0"])
    plan = build_plan(cut)
    if not plan["counts_equal"]:
        raise TwinrunError(f"plan: per-step counts differ between backends ({', '.join(plan['mismatched_counts'])})"
                           " (fix: run `twinrun plan` and align the knobs)")
    registry.check_runnable(backend, cut)
    log(f"preflight: {backend}, {spec.name} with {spec.curator.model} cut to {LAYERS} layers (random weights), "
        "1 step")
    summary = registry.trainer(backend)(cut, out / "run", resume=False, cache_dir=cache_dir)
    return {"backend": backend, "model": str(model_dir), "run": str(out / "run"), **(summary or {})}
