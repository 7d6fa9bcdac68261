"""tracefs instances as guard objects: created with our settings, read concurrently, removed.

The one way warmstart traces (the recorder's block and task instances, the learner's recording,
the bench sampler, page-use tracing, speculation): `with Instance(root, role, events,
event_pids=[seed], options=("event-fork",)) as inst:` inst.start() ... inst.take() (the parsed
events.Event list since the last take, also while tracing) ... inst.stop(); the process tree of
the traced command comes from those events (tasks.Forks / tasks.build_tree).

Each instance is a private ring buffer (instances/warmstart-rec-<pid>-<role>), so the global
buffer and other users' instances are left alone. A reader thread drains trace_pipe while the
launch runs so the buffer does not overflow; per-CPU `stats` give the events lost anyway.
Instances left behind by a process that was killed are removed by remove_stale_instances().
"""

import errno
import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable, List, Optional, Sequence

from ..errors import WarmstartError
from ..procs import running
from .events import Event, parse_lines

TRACEFS_MOUNTS = ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")
PREFIX = "warmstart-rec-"
DRAIN_PERIOD_S = 0.05      # how often the reader empties trace_pipe into memory


def _mounted_root() -> Optional[Path]:
    return next((Path(p) for p in TRACEFS_MOUNTS if os.path.isdir(os.path.join(p, "instances"))), None)


def tracefs_root() -> Path:
    """The tracefs mount. As root, mounts it at its standard place when it is absent and leaves it
    there (as systemd does at boot and trace-cmd does on demand): recorder, bench sampler, page-use
    tracer and fallback may use it at the same time, so none of them may unmount it."""
    root = _mounted_root()
    if root is not None:
        return root
    if os.geteuid() != 0:
        raise WarmstartError("tracefs is not mounted and only root can mount it: run as root, or "
                             "mount -t tracefs nodev /sys/kernel/tracing")
    r = subprocess.run(["mount", "-t", "tracefs", "nodev", TRACEFS_MOUNTS[0]], capture_output=True, text=True)
    if r.returncode != 0 or not os.path.isdir(os.path.join(TRACEFS_MOUNTS[0], "instances")):
        raise WarmstartError(f"tracefs is not mounted and mounting it failed ({r.stderr.strip()}): "
                             "mount -t tracefs nodev /sys/kernel/tracing, or check the kernel has CONFIG_TRACING")
    return Path(TRACEFS_MOUNTS[0])


def instance_name(role: str) -> str:
    """The name of this process's tracefs instance for `role`: every instance warmstart makes is
    named so, and remove_stale_instances() removes those whose process is gone."""
    return f"{PREFIX}{os.getpid()}-{role}"


BUSY_WAIT_S = 2.0   # how long a removal waits for an instance's files to be closed


def _remove(path: Path) -> None:
    """rmdir an instance, waiting up to BUSY_WAIT_S while it is busy (EBUSY: a file of it is open).
    Those references are transient: a dead owner's files still being closed, or a child forked by
    another of our threads holding copies of our fds until it execs (Popen's fork-to-exec window)."""
    deadline = time.monotonic() + BUSY_WAIT_S
    while True:
        try:
            os.rmdir(path)
            return
        except OSError as e:
            if e.errno != errno.EBUSY or time.monotonic() >= deadline:
                raise
        time.sleep(0.02)


def remove_stale_instances(root: Path) -> List[str]:
    """Remove our instances whose recorder process is gone (it crashed or was killed).
    Returns what was removed; raises WarmstartError naming an instance that cannot be removed."""
    removed = []
    inst = root / "instances"
    for name in sorted(os.listdir(inst)):
        if not name.startswith(PREFIX):
            continue
        pid_part = name[len(PREFIX):].split("-", 1)[0]
        if not pid_part.isdigit() or running(int(pid_part)):
            continue
        try:
            _remove(inst / name)
            removed.append(name)
        except FileNotFoundError:
            pass  # another recorder removed it first
        except OSError as e:
            raise WarmstartError(f"cannot remove stale tracefs instance {inst / name}: {e.strerror}; "
                                 f"close whatever reads it, then: rmdir {inst / name}")
    return removed


def clean_root(say: Callable[[str], None]) -> Path:
    """tracefs_root(), with the instances of processes that died removed (each one said)."""
    root = tracefs_root()
    for stale in remove_stale_instances(root):
        say(f"removed tracefs instance {stale} left by a process that died")
    return root


def list_our_instances(root: Optional[Path] = None) -> List[str]:
    root = root or _mounted_root()
    if root is None:
        return []
    return [n for n in os.listdir(root / "instances") if n.startswith(PREFIX)]


class Instance:
    """One tracefs instance: `with Instance(root, role, events, ...) as inst:` inst.start(),
    inst.take() as often as wanted, inst.stop(); leaving the `with` removes it, also on errors.

    events: "system/event" names; options: tracefs options to set (record-tgid, event-fork);
    event_pids: only these tasks (and, with event-fork, what they fork) are traced;
    filters: {event: filter expression} applied in the kernel."""

    def __init__(self, root: Path, role: str, events: Sequence[str], buffer_kb: int = 8192,
                 options: Sequence[str] = (), event_pids: Sequence[int] = (), filters=None):
        self.root = root
        self.name = instance_name(role)
        self.path = root / "instances" / self.name
        self.events = list(events)
        self.buffer_kb = buffer_kb
        self.options = list(options)
        self.event_pids = list(event_pids)
        self.filters = dict(filters or {})
        self._chunks: List[bytes] = []   # read, not yet taken
        self._read_lock = threading.Lock()  # a read and its append, in trace order
        self._fd: Optional[int] = None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.reader_error: Optional[BaseException] = None

    # -- set up ---------------------------------------------------------------------------
    def _write(self, rel: str, value: str) -> None:
        try:
            with open(self.path / rel, "w") as f:
                f.write(value)
        except OSError as e:
            raise WarmstartError(f"cannot write {value!r} to {self.path / rel}: {e.strerror}; "
                                 f"is this event or option available in this kernel?")

    def __enter__(self):
        for ev in self.events:
            if not (self.root / "events" / ev).is_dir():
                raise WarmstartError(f"this kernel has no tracepoint {ev} ({self.root / 'events' / ev} is "
                                     f"missing): it needs a kernel built with it (CONFIG_TRACING and the "
                                     f"subsystem's tracepoints)")
        try:
            os.mkdir(self.path)
        except FileExistsError:
            os.rmdir(self.path)  # ours from an earlier run of this same pid; nothing reads it
            os.mkdir(self.path)
        except OSError as e:
            raise WarmstartError(f"cannot create tracefs instance {self.path}: {e.strerror}; run as root")
        try:
            self._write("tracing_on", "0")
            self._write("trace_clock", "mono")  # comparable with time.monotonic_ns()
            self._write("buffer_size_kb", str(self.buffer_kb))
            for opt in self.options:
                self._write(f"options/{opt}", "1")
            if self.event_pids:
                self._write("set_event_pid", " ".join(map(str, self.event_pids)))
            for ev in self.events:
                if ev in self.filters:
                    self._write(f"events/{ev}/filter", self.filters[ev])
                self._write(f"events/{ev}/enable", "1")
            self._fd = os.open(self.path / "trace_pipe", os.O_RDONLY | os.O_NONBLOCK)
            self._thread = threading.Thread(target=self._read_loop, daemon=True, name=f"trace-{self.name}")
            self._thread.start()
        except BaseException:
            self.close()
            raise
        return self

    def start(self) -> None:
        self._write("tracing_on", "1")

    def begin(self) -> "Instance":
        """Set up and start tracing at once (outside a with block); removed again if that fails."""
        self.__enter__()
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    # -- reading --------------------------------------------------------------------------
    def _drain(self) -> None:
        with self._read_lock:
            while self._fd is not None:
                try:
                    data = os.read(self._fd, 1 << 20)
                except BlockingIOError:
                    return
                except OSError as e:
                    if e.errno == errno.EINTR:
                        continue
                    raise
                if not data:
                    return
                self._chunks.append(data)

    def take(self) -> List[Event]:
        """The events read since the last take, in trace order (the reader thread's and what the
        ring buffer holds now). While tracing, a line not yet complete waits for the next take;
        after stop() everything is returned."""
        if self.reading:
            self._drain()
        with self._read_lock:
            data, self._chunks = b"".join(self._chunks), []
            if self.reading:
                data, _, rest = data.rpartition(b"\n")
                if rest:
                    self._chunks.append(rest)
        return parse_lines(data.split(b"\n"))

    def _read_loop(self) -> None:
        # Drain on a fixed period, not on every wake-up: a select() on trace_pipe wakes this
        # thread for each burst of events, and that CPU is taken from the launch being traced.
        # The buffer (8 MiB per CPU by default) holds far more than DRAIN_PERIOD_S of events.
        try:
            while not self._stop.wait(DRAIN_PERIOD_S):
                self._drain()
        except BaseException as e:  # surfaced by check(); the recording is then refused
            self.reader_error = e

    def check(self) -> None:
        if self.reader_error is not None:
            raise WarmstartError(f"reading {self.path}/trace_pipe failed: {self.reader_error}")

    @property
    def reading(self) -> bool:
        """Started and not yet stopped."""
        return self._thread is not None

    def stop(self) -> None:
        """Stop tracing and read everything left in the buffer."""
        self._write("tracing_on", "0")
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.check()
        self._drain()

    def lost_events(self) -> int:
        """Events the ring buffer overwrote or dropped, summed over CPUs."""
        lost = 0
        for cpu_dir in sorted((self.path / "per_cpu").iterdir()):
            try:
                text = (cpu_dir / "stats").read_text()
            except OSError:
                continue
            for line in text.splitlines():
                key, _, val = line.partition(":")
                if key.strip() in ("overrun", "dropped events"):
                    lost += int(val.split()[0])
        return lost

    # -- tear down ------------------------------------------------------------------------
    def close(self) -> None:
        """Remove the instance (its events and buffer go with it); safe to call twice."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
            self._thread = None
        with self._read_lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
        if self.path.exists():
            try:
                with open(self.path / "tracing_on", "w") as f:
                    f.write("0")
            except OSError:
                pass
            try:
                _remove(self.path)
            except FileNotFoundError:
                pass
            except OSError as e:
                raise WarmstartError(f"cannot remove tracefs instance {self.path}: {e.strerror}; "
                                     f"remove it with: rmdir {self.path}")

    def __exit__(self, *exc):
        self.close()
        return False
