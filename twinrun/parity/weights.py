"""Moved to :mod:`twinrun.app.parity.weights`; this alias keeps the old import path working (the same module object)."""

import sys

import twinrun.app.parity.weights as _moved

sys.modules[__name__] = _moved
