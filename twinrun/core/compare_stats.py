"""Former home of compare's pure statistics; they live in :mod:`twinrun.core.compare.stats` and
:mod:`twinrun.core.compare.clogit` now. Re-exported here until the tests import the package."""

from twinrun.core.compare.clogit import *  # noqa: F401,F403
from twinrun.core.compare.clogit import _lpm_wald  # noqa: F401
from twinrun.core.compare.stats import *  # noqa: F401,F403
