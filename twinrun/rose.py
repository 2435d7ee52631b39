"""Moved to :mod:`twinrun.app.rose`; this alias keeps the old import path working (the same module object)."""

import sys

import twinrun.app.rose as _moved

sys.modules[__name__] = _moved
