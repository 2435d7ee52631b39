"""Moved to :mod:`twinrun.models.warmstart`; this alias keeps the old import path working (the same module object)."""

import sys

import twinrun.models.warmstart as _moved

sys.modules[__name__] = _moved
