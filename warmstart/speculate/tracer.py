"""Page-cache events of our own process tree, from the recorder's tracefs instance.

One instance (`warmstart-rec-<pid>-spec`: the next recorder removes it if this process dies) with
the filemap events (misses: add_to_page_cache; uses: get_pages for reads, fault and map_pages for
mappings) and sched_process_fork, limited to this process and everything it starts
(set_event_pid + event-fork), so the launch and the speculative copy are seen from their first
instruction. Removed again on stop, also on error. The instance, the line and event parsers and
the process tree are the recorder's (recorder/tracefs.py, events.py, tasks.py); this module only
names the events for speculation.
"""

import os
from dataclasses import dataclass
from typing import Iterable, List, Optional, Set

from ..recorder import events
from ..recorder.tasks import Forks
from ..recorder.tracefs import Instance, tracefs_root

EVENTS = ("filemap/mm_filemap_add_to_page_cache", "filemap/mm_filemap_get_pages",
          "filemap/mm_filemap_fault", "filemap/mm_filemap_map_pages", "sched/sched_process_fork")
PAGE = 4096


@dataclass(frozen=True)
class PageEvent:
    t: float            # trace clock (CLOCK_MONOTONIC) seconds
    pid: int            # thread that caused it
    kind: str           # miss | read | fault | map
    dev: int            # os.makedev(major, minor) of the file's superblock
    ino: int
    first: int          # page index
    npages: int


KINDS = {"mm_filemap_add_to_page_cache": "miss", "mm_filemap_get_pages": "read",
         "mm_filemap_fault": "fault", "mm_filemap_map_pages": "map"}


def page_events(evs: Iterable[events.Event]) -> List[PageEvent]:
    """The filemap events among evs as PageEvents (other events are skipped)."""
    out = []
    for ev in evs:
        kind = KINDS.get(ev.name)
        pages = events.filemap_pages(ev.body) if kind is not None else None
        if pages is not None:
            out.append(PageEvent(ev.ts_ns / 1e9, ev.tid, kind, *pages))
    return out


class Tracer:
    """Use as a context manager; `take()` returns the events parsed since the last call,
    tree(pid) the tasks pid and what it forked (from the fork events taken so far)."""

    def __init__(self, buffer_kb: int = 8192):
        self.buffer_kb = buffer_kb
        self.forks = Forks()
        self._inst: Optional[Instance] = None
        self.lost = 0

    def start(self) -> "Tracer":
        self._inst = Instance(tracefs_root(), "spec", EVENTS, buffer_kb=self.buffer_kb,
                              options=("event-fork",), event_pids=[os.getpid()]).begin()
        return self

    @property
    def name(self) -> Optional[str]:
        """The tracefs instance's name, once started."""
        return self._inst.name if self._inst is not None else None

    def take(self) -> List[PageEvent]:
        if self._inst is None:
            return []
        evs = self._inst.take()
        self.forks.add(evs)
        return page_events(evs)

    def tree(self, pid: int) -> Set[int]:
        return set(self.forks.tree(pid))

    def stop(self) -> None:
        """Stop tracing, keep what is buffered for take(), remove the instance (safe to call twice)."""
        if self._inst is None:
            return
        try:
            if self._inst.reading:
                self._inst.stop()
                self.lost = self._inst.lost_events()
        finally:
            self._inst.close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False
