"""Moved to :mod:`twinrun.backends.sft_plan`; this alias keeps the old import path working (the same module object)."""

import sys

import twinrun.backends.sft_plan as _moved

sys.modules[__name__] = _moved
