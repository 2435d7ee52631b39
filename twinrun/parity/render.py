"""Moved to :mod:`twinrun.app.parity.render`; this alias keeps the old import path working (the same module object)."""

import sys

import twinrun.app.parity.render as _moved

sys.modules[__name__] = _moved
