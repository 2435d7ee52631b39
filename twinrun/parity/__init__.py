"""Moved to :mod:`twinrun.app.parity`; this package keeps the old import paths (``twinrun.parity.run`` etc.) working."""
