"""The one interface every block-trace backend implements, and the choice between them.

A backend captures every block request on the system's block devices between start() and
stop(), with submitter, queue/issue/complete times; attribution to the launch happens later
(attribution.py) and is the same for all backends.
"""

from typing import List, Optional, Sequence

from ..model import BlockRequest


class BlockBackend:
    """Use as a context manager: __enter__ sets up, __exit__ undoes everything, even on errors."""

    name = "?"

    def __enter__(self) -> "BlockBackend":
        return self

    def __exit__(self, *exc) -> bool:
        return False

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def check(self) -> None:
        """Raise WarmstartError if capture broke while running (called while the launch runs)."""

    def requests(self) -> List[BlockRequest]:
        """Requests in issue order, times CLOCK_MONOTONIC ns; valid after stop()."""
        raise NotImplementedError

    def lost_events(self) -> int:
        return 0


def choose_backend(name: str, devices: Sequence[int], tracefs_root, say) -> BlockBackend:
    """'tracefs', 'blktrace' or 'auto'. blktrace is tried at run time (its relay files may be
    unreadable, EPERM here) and falls back to tracefs with one line saying why."""
    from .blktrace import BlktraceBackend, blktrace_unavailable
    from .tracefs_backend import TracefsBlockBackend

    if name == "tracefs":
        return TracefsBlockBackend(tracefs_root)
    if name not in ("auto", "blktrace"):
        from ..errors import WarmstartError
        raise WarmstartError(f"unknown backend {name!r}: use auto, blktrace or tracefs")
    why: Optional[str] = blktrace_unavailable(devices)
    if why is None:
        return BlktraceBackend(devices)
    say(f"blktrace unavailable ({why}); using tracefs block tracepoints instead")
    return TracefsBlockBackend(tracefs_root)
