"""The one exception family the CLI turns into a one-line message and exit code 2."""


class TwinrunError(Exception):
    """Bad input or a refused operation. ``str(err)`` is one line: field/value, rule, fix."""


class DependencyMissing(TwinrunError):
    """An optional dependency (a backend's framework) is not installed; the message names the extra."""


class InfrastructureError(Exception):
    """An endpoint, simulator or worker failed. Never a task failure: the episode becomes `unmeasured`."""


class EndpointUnavailable(InfrastructureError):
    """A server a whole run of calls depends on is gone (a sweep's curator server died or stopped answering): the
    work in flight is not recorded, what remains is unmeasured, and a rerun resumes it."""


class CheckpointUnreadable(InfrastructureError):
    """A checkpoint's files cannot be loaded although they passed the sweep's check before its first write (a file
    truncated or replaced since): the arms of that checkpoint become unmeasured with this one-line reason, and the
    sweep goes on with the other checkpoints."""
