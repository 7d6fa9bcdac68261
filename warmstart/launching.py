"""Start a command and decide when its launch has ended (shared by record, run and bench).

The launch end is chosen with an `--until` spec:
  exit           the command exits (default)
  idle=S         the watched block devices did no I/O for S seconds; the launch ends at the
                 last I/O activity seen before that idle period (the paper trims at 1.0 s)
  stdout=REGEX   the command printed a line matching REGEX (bytes regex, searched in stdout)
  file=PATH      PATH exists
Every mode also ends when the command exits, and a timeout ends it with reason 'timeout'.
Times are CLOCK_MONOTONIC nanoseconds, the clock the recorder's tracefs instance uses too.
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, List, Mapping, Optional, Sequence

from .devices import sysfs_path
from .errors import WarmstartError

POLL_S = 0.005  # launch-end polling period: 5 ms bounds the error of exit/file/idle ends
KILL_GRACE_S = 2.0


@dataclass(frozen=True)
class Until:
    kind: str                       # exit | idle | stdout | file
    idle_s: float = 0.0
    regex: Optional[bytes] = None
    path: Optional[bytes] = None

    def __str__(self):
        if self.kind == "idle":
            return f"idle={self.idle_s:g}"
        if self.kind == "stdout":
            return "stdout=" + os.fsdecode(self.regex)
        if self.kind == "file":
            return "file=" + os.fsdecode(self.path)
        return "exit"


def parse_until(spec: str) -> Until:
    """Parse an --until string; a bad one fails fast with the accepted forms."""
    forms = "use exit, idle=SECONDS, stdout=REGEX or file=PATH"
    if spec in ("exit", "", None):
        return Until("exit")
    kind, sep, arg = spec.partition("=")
    if not sep or not arg:
        raise WarmstartError(f"bad --until {spec!r}: {forms}")
    if kind == "idle":
        try:
            s = float(arg)
        except ValueError:
            raise WarmstartError(f"bad --until {spec!r}: idle needs seconds, e.g. idle=1.0")
        if not (0 < s < 3600):
            raise WarmstartError(f"bad --until {spec!r}: idle seconds must be in (0, 3600)")
        return Until("idle", idle_s=s)
    if kind == "stdout":
        raw = os.fsencode(arg)
        try:
            re.compile(raw, re.MULTILINE)
        except re.error as e:
            raise WarmstartError(f"bad --until {spec!r}: invalid regular expression ({e})")
        return Until("stdout", regex=raw)
    if kind == "file":
        return Until("file", path=os.fsencode(arg))
    raise WarmstartError(f"bad --until {spec!r}: {forms}")


def host_steal_s() -> Optional[float]:
    """CPU seconds the hypervisor has run other guests on this machine's CPUs (all of them) since
    boot: the steal column of /proc/stat; None where the kernel does not count it. Over a launch,
    time in which the launch's CPU work was not done though it was running: a virtual machine's
    host can slow a launch by more than any prefetch speeds it up (docs/benchmarks.md)."""
    try:
        with open("/proc/stat", "rb") as f:
            fields = f.readline().split()
        return int(fields[8]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


@dataclass
class LaunchResult:
    pid: int
    start_ns: int                   # CLOCK_MONOTONIC, just before the fork
    end_ns: int                     # the launch end (for idle: the last I/O activity)
    end_reason: str                 # exit | idle | stdout | file | timeout
    exit_status: Optional[int]      # returncode (negative = killed by that signal); None if still running at the end
    output: bytes = b""
    devices: List[int] = field(default_factory=list)
    cpu_s: Optional[float] = None   # the command's user + system CPU (its waited-for children's too), at exit
    steal_s: Optional[float] = None  # CPU time the hypervisor took from this machine meanwhile (host_steal_s)

    @property
    def launch_time_s(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9

    @property
    def crashed(self) -> bool:
        return self.exit_status is not None and self.exit_status < 0

    def describe_exit(self) -> str:
        if self.exit_status is None:
            return "still running at the launch end"
        if self.exit_status < 0:
            try:
                name = signal.Signals(-self.exit_status).name
            except ValueError:
                name = f"signal {-self.exit_status}"
            return f"killed by {name}"
        return f"exit status {self.exit_status}"


def resolve_command(argv: Sequence[str], cwd=None, env: Optional[Mapping[str, str]] = None) -> bytes:
    """The executable argv[0] names, as an absolute path; a clear error if there is none."""
    if not argv:
        raise WarmstartError("no command given: put it after --, e.g. -- python3 -c 'import json'")
    name = argv[0]
    if os.sep in os.fsdecode(name):
        path = os.path.join(os.fsdecode(cwd) if cwd else os.getcwd(), os.fsdecode(name))
        if not os.path.exists(path):
            raise WarmstartError(f"command not found: {os.fsdecode(name)} (no such file); check the path")
        if not os.access(path, os.X_OK) or os.path.isdir(path):
            raise WarmstartError(f"command not executable: {os.fsdecode(name)}; chmod +x it or check the path")
        return os.fsencode(os.path.realpath(path))
    search = (env or os.environ).get("PATH", os.defpath)
    found = shutil.which(os.fsdecode(name), path=search)
    if not found:
        raise WarmstartError(f"command not found: {os.fsdecode(name)} (not in PATH); give its full path or fix PATH")
    return os.fsencode(os.path.realpath(found))


def devices_of_paths(paths: Sequence[bytes]) -> List[int]:
    """Block devices (dev_t) holding the given existing paths; others (tmpfs, proc) are skipped."""
    out = []
    for p in paths:
        try:
            dev = os.stat(p).st_dev
        except OSError:
            continue
        if os.path.exists(sysfs_path(dev) + "/stat") and dev not in out:
            out.append(dev)
    return out


def _read_dev_stat(dev: int) -> Optional[tuple]:
    """(sectors read, sectors written, in flight) from /sys/dev/block/M:m/stat."""
    try:
        with open(sysfs_path(dev) + "/stat") as f:
            v = f.read().split()
        return (int(v[2]), int(v[6]), int(v[8]), int(v[0]), int(v[4]))
    except (OSError, IndexError, ValueError):
        return None


class _OutputPump(threading.Thread):
    """Copy the child's stdout to ours as it comes, keeping a copy and watching for a regex."""

    def __init__(self, stream, regex: Optional[bytes], passthrough: bool):
        super().__init__(daemon=True, name="warmstart-stdout")
        self.stream = stream
        self.regex = re.compile(regex, re.MULTILINE) if regex else None  # ^ and $ match at lines
        self.passthrough = passthrough
        self.chunks: List[bytes] = []
        self.match_ns: Optional[int] = None
        self._tail = b""

    def run(self):
        out = getattr(sys.stdout, "buffer", None)
        while True:
            try:
                data = os.read(self.stream.fileno(), 65536)
            except OSError:
                break
            if not data:
                break
            now = time.monotonic_ns()
            self.chunks.append(data)
            if self.passthrough and out is not None:
                try:
                    out.write(data)
                    out.flush()
                except (OSError, ValueError):
                    pass
            if self.regex is not None and self.match_ns is None:
                # search the new data plus a tail of the old, so a match split over reads is found
                window = self._tail + data
                if self.regex.search(window):
                    self.match_ns = now
                self._tail = window[-4096:]

    @property
    def output(self) -> bytes:
        return b"".join(self.chunks)


def _kill_group(proc: subprocess.Popen) -> None:
    """End the command and everything it started (it leads its own process group)."""
    if proc.poll() is not None:
        # the leader is gone, but children may remain in its group
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        return
    for sig, wait in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        except OSError:
            proc.send_signal(sig)
        try:
            proc.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass


class _SignalsDeferred:
    """Hold SIGINT, SIGTERM and SIGHUP back while the command is being started.

    A Ctrl-C that lands inside Popen (after the fork, while it waits for the exec) or before the
    Popen object is kept would raise with the child running and nobody to end it: the command
    ran on, holding the caller's stderr open. While held, a signal is only noted; release()
    puts the handlers back and raises each noted signal again, once the child can be ended.
    Outside the main thread (no handlers can be set) nothing is held."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self):
        self.saved, self.pending = {}, []
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                if signal.getsignal(sig) is not None:  # None: set outside Python, left alone
                    self.saved[sig] = signal.signal(sig, self._note)

    def _note(self, signum, frame):
        self.pending.append(signum)

    def release(self):
        saved, self.saved = self.saved, {}
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        for sig in dict.fromkeys(self.pending):
            signal.raise_signal(sig)  # its own handler now (Ctrl-C: KeyboardInterrupt)


def _start(argv: Sequence, cwd, env) -> subprocess.Popen:
    try:
        return subprocess.Popen(list(argv), cwd=cwd, env=dict(env) if env is not None else None,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                start_new_session=True)  # own group: the end kills all of it
    except FileNotFoundError as e:
        raise WarmstartError(f"command not found: {e.filename}; give its full path or fix PATH")
    except PermissionError as e:
        raise WarmstartError(f"cannot execute {e.filename}: permission denied; chmod +x it")
    except OSError as e:
        raise WarmstartError(f"cannot start {os.fsdecode(argv[0])}: {e.strerror}")


def _reap(proc: subprocess.Popen) -> Optional[float]:
    """Popen.poll() that also takes the exited command's CPU time (wait4's rusage): sets
    proc.returncode and returns user + system seconds once it has exited, else None."""
    if proc.returncode is not None:
        return None
    try:
        pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
    except ChildProcessError:   # reaped elsewhere: no rusage
        proc.poll()
        return None
    if pid == 0:
        return None
    proc.returncode = os.waitstatus_to_exitcode(status)
    return ru.ru_utime + ru.ru_stime


def launch(argv: Sequence, until: Until = Until("exit"), timeout: float = 60.0, *,
           cwd=None, env: Optional[Mapping[str, str]] = None, devices: Sequence[int] = (),
           passthrough: bool = True, kill_at_end: bool = True,
           on_started: Optional[Callable[[int], None]] = None,
           keep_running: Optional[Callable[[], None]] = None) -> LaunchResult:
    """Run argv until its launch end; return when, why, and with what status it ended.

    devices: dev_t of block devices watched for `idle` (default: those holding argv's paths).
    kill_at_end: after a non-exit end, end the command's whole process group (for record and
        bench); with False it is left running (for `warmstart run`).
    on_started(pid): called right after the fork (the recorder notes the root of the tree).
    keep_running(): called every poll; it may raise to abort the launch (the command is killed).
    Raises WarmstartError if the command cannot be started.
    """
    resolve_command(argv, cwd, env)
    if until.kind == "idle" and not devices:
        devices = devices_of_paths([os.fsencode(a) for a in argv] + [resolve_command(argv, cwd, env)])
        if not devices:
            raise WarmstartError("--until idle needs a block device to watch and none of the command's "
                                 "paths is on one: pass --device /dev/...")
    devices = list(devices)
    steal0 = host_steal_s()
    start_ns = time.monotonic_ns()
    held = _SignalsDeferred()
    try:
        proc = _start(argv, cwd, env)
    except BaseException:
        held.release()
        raise
    pump = _OutputPump(proc.stdout, until.regex if until.kind == "stdout" else None, passthrough)
    pump.start()
    end_ns = None
    reason = None
    try:
        held.release()  # a signal that came during the start is raised here: the command is ended
        if on_started is not None:
            on_started(proc.pid)
        deadline = start_ns + int(timeout * 1e9)
        last = {d: _read_dev_stat(d) for d in devices}
        last_io_ns = start_ns
        while True:
            cpu_s = _reap(proc)
            if proc.returncode is not None:
                end_ns, reason = time.monotonic_ns(), "exit"
                break
            now = time.monotonic_ns()
            if until.kind == "stdout" and pump.match_ns is not None:
                end_ns, reason = pump.match_ns, "stdout"
                break
            if until.kind == "file" and os.path.lexists(until.path):
                end_ns, reason = now, "file"
                break
            if until.kind == "idle":
                for d in devices:
                    st = _read_dev_stat(d)
                    if st != last[d] or (st is not None and st[2] > 0):
                        last[d] = st
                        last_io_ns = now
                if now - last_io_ns >= until.idle_s * 1e9:
                    end_ns, reason = last_io_ns, "idle"
                    break
            if now >= deadline:
                end_ns, reason = now, "timeout"
                break
            if keep_running is not None:
                keep_running()
            time.sleep(POLL_S)
    except BaseException:
        _kill_group(proc)
        pump.join(timeout=2)
        raise
    status = proc.returncode if reason == "exit" else None
    steal1 = host_steal_s()
    if kill_at_end:
        _kill_group(proc)  # after an exit this ends children it left behind
    if reason == "exit" or kill_at_end:
        pump.join(timeout=5)
    return LaunchResult(pid=proc.pid, start_ns=start_ns, end_ns=end_ns, end_reason=reason,
                        exit_status=status, output=pump.output, devices=devices,
                        cpu_s=cpu_s if reason == "exit" else None,
                        steal_s=None if steal0 is None or steal1 is None else steal1 - steal0)
