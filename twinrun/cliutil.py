"""Moved to :mod:`twinrun.commands._common`; this alias keeps the old import path working (the same module object)."""

import sys

import twinrun.commands._common as _moved

sys.modules[__name__] = _moved
