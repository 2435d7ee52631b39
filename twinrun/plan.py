"""Moved to :mod:`twinrun.app.plan`; this alias keeps the old import path working (the same module object)."""

import sys

import twinrun.app.plan as _moved

sys.modules[__name__] = _moved
