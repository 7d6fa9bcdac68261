"""Page-cache events of our own process tree from a private tracefs instance.

One instance (`warmstart-rec-<pid>-spec`: the next recorder removes it if this process dies) with
the filemap events (misses: add_to_page_cache; uses: get_pages for reads, fault and map_pages for
mappings) and sched_process_fork, limited to this process and everything it starts
(set_event_pid + event-fork), so the launch and the speculative copy are seen from their first
instruction. Removed again on stop, also on error.
"""

import os
import re
import select
import threading
from dataclasses import dataclass
from typing import Dict, List, Optional

from ..errors import WarmstartError
from ..recorder import events
from ..recorder.tracefs import instance_name, tracefs_root

EVENTS = ("filemap/mm_filemap_add_to_page_cache", "filemap/mm_filemap_get_pages",
          "filemap/mm_filemap_fault", "filemap/mm_filemap_map_pages", "sched/sched_process_fork")
FORK = re.compile(rb"pid=(\d+) child_comm=.* child_pid=(\d+)")
PAGE = 4096


@dataclass(frozen=True)
class PageEvent:
    t: float            # trace clock seconds
    pid: int            # thread that caused it
    kind: str           # miss | read | fault | map
    dev: int            # os.makedev(major, minor) of the file's superblock
    ino: int
    first: int          # page index
    npages: int


KINDS = {"mm_filemap_add_to_page_cache": "miss", "mm_filemap_get_pages": "read",
         "mm_filemap_fault": "fault", "mm_filemap_map_pages": "map"}


def parse_line(line: bytes, parents: Dict[int, int]) -> Optional[PageEvent]:
    ev = events.parse_line(line)   # the recorder's trace_pipe line format, one parser for both
    if ev is None:
        return None
    pid, t, name, rest = ev.tid, ev.ts_ns / 1e9, ev.name, ev.body
    if name == "sched_process_fork":
        f = FORK.search(rest)
        if f:
            parents[int(f.group(2))] = int(f.group(1))
        return None
    kind = KINDS.get(name)
    pages = events.filemap_pages(rest) if kind is not None else None
    if pages is None:
        return None
    return PageEvent(t, pid, kind, *pages)


class Tracer:
    """Use as a context manager; `take()` returns the events parsed since the last call."""

    def __init__(self, name: Optional[str] = None, buffer_kb: int = 8192):
        self.name = name or instance_name("spec")
        self.dir = ""
        self.buffer_kb = buffer_kb
        self.parents: Dict[int, int] = {}
        self._events: List[PageEvent] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._pipe = None
        self.lost = 0

    def _w(self, rel: str, value: str) -> None:
        with open(os.path.join(self.dir, rel), "w") as f:
            f.write(value)

    def start(self) -> "Tracer":
        root = tracefs_root()
        if not os.path.isdir(root / "events" / "filemap"):
            raise WarmstartError(f"no filemap events in {root}: this kernel lacks the filemap tracepoints")
        self.dir = os.path.join(root, "instances", self.name)
        try:
            os.mkdir(self.dir)
        except FileExistsError:
            pass
        except OSError as e:
            raise WarmstartError(f"cannot create tracefs instance {self.dir}: {e.strerror}; run as root")
        try:
            self._w("buffer_size_kb", str(self.buffer_kb))
            self._w("set_event_pid", str(os.getpid()))
            self._w("options/event-fork", "1")
            for ev in EVENTS:
                self._w(f"events/{ev}/enable", "1")
            self._pipe = os.open(os.path.join(self.dir, "trace_pipe"), os.O_RDONLY | os.O_NONBLOCK)
            self._w("tracing_on", "1")
        except BaseException:
            self.stop()
            raise
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()
        return self

    def _pump(self) -> None:
        buf = b""
        while True:
            stopping = self._stop.is_set()
            r, _, _ = select.select([self._pipe], [], [], 0.02)
            chunk = b""
            if r:
                try:
                    chunk = os.read(self._pipe, 1 << 16)
                except BlockingIOError:
                    pass
            if chunk:
                buf += chunk
                lines = buf.split(b"\n")
                buf = lines.pop()
                evs = []
                for line in lines:
                    if b"LOST" in line and b"EVENTS" in line:
                        self.lost += 1
                    e = parse_line(line, self.parents)
                    if e is not None:
                        evs.append(e)
                with self._lock:
                    self._events.extend(evs)
            elif stopping:
                return

    def take(self) -> List[PageEvent]:
        with self._lock:
            out, self._events = self._events, []
        return out

    def stop(self) -> None:
        """Stop tracing, drain what is buffered, remove the instance (safe to call twice)."""
        if not os.path.isdir(self.dir):
            return
        try:
            self._w("tracing_on", "0")
        except OSError:
            pass
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=10)
            self._thread = None
        if self._pipe is not None:
            os.close(self._pipe)
            self._pipe = None
        for ev in EVENTS:
            try:
                self._w(f"events/{ev}/enable", "0")
            except OSError:
                pass
        try:
            os.rmdir(self.dir)
        except OSError:
            pass

    def root_of(self, pid: int, roots) -> Optional[int]:
        """Which of `roots` pid descends from (by the fork events seen), or None."""
        seen = 0
        while pid not in roots and seen < 64:
            nxt = self.parents.get(pid)
            if nxt is None:
                return None
            pid, seen = nxt, seen + 1
        return pid if pid in roots else None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False
