"""Moved to :mod:`twinrun.app.parity.knobs`; this alias keeps the old import path working (the same module object)."""

import sys

import twinrun.app.parity.knobs as _moved

sys.modules[__name__] = _moved
