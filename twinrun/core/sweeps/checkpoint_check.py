"""Is a checkpoint folder loadable? Checked before a sweep's first write (issue 53: a checkpoint cut short by a
preempted save or a full disk used to surface as a traceback after the baseline had played for minutes).

Reads file headers only, never tensors, and imports no framework (core): a safetensors file starts with an 8-byte
little-endian header length and a JSON header whose ``data_offsets`` say where each tensor's bytes end, so a file
cut anywhere is seen from its size alone. A ``pytorch_model.bin`` is a zip archive whose central directory sits at
its end, so a cut one fails to open. Also: ``config.json`` parses to an object, and a tokenizer is there (in the
checkpoint, or in the fallback folder the curator would load it from)."""

from __future__ import annotations

import json
import struct
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path

# the files a transformers tokenizer loads its vocabulary from (any one is enough)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "spiece.model", "vocab.txt")
Fallback = str | Path | Callable[[], "str | Path | None"] | None
# a safetensors header larger than this is not a header (the format caps it at 100 MB)
MAX_HEADER = 100_000_000


def safetensors_problem(path: Path) -> str | None:
    """What is wrong with one safetensors file (None: its header parses and every tensor's bytes are there)."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            return f"{path.name}: {size} bytes, too short for a safetensors header (truncated)"
        (n,) = struct.unpack("<Q", head)
        if n > MAX_HEADER or 8 + n > size:
            return f"{path.name}: header length {n} exceeds the file's {size} bytes (truncated or not safetensors)"
        raw = f.read(n)
    try:
        header = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        return f"{path.name}: its header is not JSON ({type(e).__name__}; corrupt)"
    if not isinstance(header, dict):
        return f"{path.name}: its header is not a JSON object (corrupt)"
    end = max((int(t["data_offsets"][1]) for k, t in header.items()
               if k != "__metadata__" and isinstance(t, dict) and len(t.get("data_offsets") or ()) == 2), default=0)
    if 8 + n + end > size:
        return f"{path.name}: its tensors need {8 + n + end} bytes, the file has {size} (truncated)"
    return None


def checkpoint_problem(path: str | Path, tokenizer_fallback: Fallback = None) -> str | None:
    """What keeps the checkpoint folder from loading, in a few words (None: nothing found). tokenizer_fallback: the
    folder a curator loads the tokenizer from when the checkpoint has none (curator.model), or a callable that
    finds it (called only for a checkpoint without a tokenizer), or None."""
    root = Path(path)
    try:
        config = json.loads((root / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        return f"config.json does not load ({type(e).__name__}: {str(e).splitlines()[0][:120]})"
    if not isinstance(config, dict):
        return "config.json is not a JSON object"
    index = root / "model.safetensors.index.json"
    if index.is_file():  # a sharded checkpoint: every shard the index names must be there
        try:
            shards = sorted(set((json.loads(index.read_text(encoding="utf-8")).get("weight_map") or {}).values()))
        except (OSError, ValueError, AttributeError):
            return f"{index.name} does not parse (corrupt)"
        missing = [s for s in shards if not (root / s).is_file()]
        if missing:
            return f"{index.name} names {missing[0]}, which is missing ({len(missing)} of {len(shards)} shards)"
    weights = sorted(root.glob("*.safetensors"))
    bins = sorted(root.glob("pytorch_model*.bin"))
    if not weights and not bins:
        return "no weight file (*.safetensors or pytorch_model.bin)"
    for w in weights:
        problem = safetensors_problem(w)
        if problem:
            return problem
    for b in bins:
        try:
            with zipfile.ZipFile(b):
                pass
        except (zipfile.BadZipFile, OSError) as e:
            return f"{b.name}: not a readable torch archive ({type(e).__name__}: truncated or corrupt)"
    if _has_tokenizer(root):
        return None
    fallback = tokenizer_fallback() if callable(tokenizer_fallback) else tokenizer_fallback
    if fallback is not None and (not Path(fallback).is_dir() or _has_tokenizer(Path(fallback))):
        return None  # a hub id is not looked up here (offline, or a download): from_pretrained finds it or says so
    where = "the checkpoint" + (f" nor in {fallback} (curator.model)" if fallback else " and none at curator.model")
    return f"no tokenizer ({', '.join(TOKENIZER_FILES[:2])}, ...) in {where}"


def _has_tokenizer(folder: Path) -> bool:
    return any((folder / name).is_file() for name in TOKENIZER_FILES)


def check_checkpoints(runs: Mapping[str, Path], tokenizer_fallback: Fallback = None) -> int:
    """Refuse (one line naming the checkpoint and the fix) the first checkpoint of any run that cannot be loaded;
    the number of checkpoints checked. Reads only: nothing is written before or by it."""
    from twinrun.core.sweeps.plan import SweepError, arm_name, discover_checkpoints

    n = 0
    for run, run_dir in runs.items():
        for step, path in discover_checkpoints(run_dir):
            n += 1
            problem = checkpoint_problem(path, tokenizer_fallback)
            if problem:
                raise SweepError(
                    f"checkpoint {arm_name(run, step)} ({path}): {problem} (fix: save the checkpoint again from its "
                    f"training run, or move {path.name} out of {path.parent} to sweep the run without it)")
    return n


__all__ = ["TOKENIZER_FILES", "check_checkpoints", "checkpoint_problem", "safetensors_problem"]
