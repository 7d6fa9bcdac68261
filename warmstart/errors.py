"""The one exception type a user sees. The CLI turns it into a clean message and exit code."""


class WarmstartError(Exception):
    """A problem the user can act on; the message names the problem and the fix."""

    exit_code = 1
