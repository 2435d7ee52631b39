"""The warm-started tiny curator, under the name the verl backend imports (``warm_started_curator``).

The implementation is backend-neutral and lives in :mod:`twinrun.models.warmstart` (both backends start ``tiny-qwen3``
from the same cached weights); this module only re-exports it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from twinrun.models.warmstart import warm_started_tiny_curator


def warm_started_curator(spec: Any, cache_dir: str | Path, **kw: Any) -> Path:
    """The warm-started ``tiny-qwen3`` folder for ``spec`` (built once under ``cache_dir``). ALFWorld data is
    found through ``$ALFWORLD_DATA`` unless ``data_root=`` is given."""
    kw.setdefault("environ", dict(os.environ))
    return warm_started_tiny_curator(spec, cache_dir, **kw)
