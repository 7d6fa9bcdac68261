"""The speculative copy: CMD run by ws-spec-run in a sandbox it cannot change anything from.

ws-spec-run (replayer/speculate/) builds the sandbox (read-only mount tree with tmpfs for
writes, empty net namespace, own pid/ipc/uts namespaces, seccomp) and turns the copy's file
opens into readahead prefetches. This module starts it, reads what it prefetched, and gives the
caller the controls the paper's resource limits need: freeze/thaw (prefetch horizon), memory
and progress readings (memory cap, "falls behind"), and a kill that always ends every process
of the copy (its pid namespace dies with its init).
"""

import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from ..errors import WarmstartError
from ..paths import helper_binary
from ..procs import running
from ..signature import split_launcher

HELPER = "ws-spec-run"


def tree_pids(root: int) -> List[int]:
    """root and all its descendants, from /proc/PID/task/TID/children (gone ones skipped)."""
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except OSError:
            continue
    return out


@dataclass(frozen=True)
class PrefetchedFile:
    dev: int            # st_dev as the copy's supervisor saw it
    ino: int
    size: int
    nbytes: int         # bytes from offset 0 handed to readahead(2)
    path: bytes         # as the copy named it


@dataclass(frozen=True)
class SandboxLimits:
    # per-file prefetch cap. Whole files cost: on the emulated HDD node's 16 MiB binary head,
    # cc1 and big data files were 84-88 % waste and made launches slower (bench --unknown);
    # small files (.pyc, .py, most libraries' start) fit. Pages beyond it the app really
    # uses come from its own reads/faults, the kernel's readahead and the online prefetcher.
    ra_max: int = 1 << 20
    budget: int = 256 << 20         # total prefetch cap: the paper's prefetch horizon in bytes
    data_max: int = 2 << 30         # RLIMIT_DATA of the copy
    rss_max: int = 512 << 20        # the copy is killed above this resident size (memory cap)
    tmpfs_mb: int = 64              # each tmpfs it may write to
    workers: int = 4                # prefetch threads: several outstanding requests to sort
    io_idle: bool = False           # IOPRIO_CLASS_IDLE (starves the copy on a busy disk) or BE 7


def split_chroot(argv: Sequence) -> Tuple[bytes, Dict[bytes, bytes], List[bytes], bool]:
    """`env -i K=V... chroot ROOT CMD...` (how emulated-disk apps are run) -> (ROOT, env, CMD, clear),
    read by signature.split_launcher. The copy cannot run chroot(1) itself (no CAP_SYS_CHROOT),
    so ws-spec-run does the chroot. Any other argv is returned as (b"/", {}, argv, False)."""
    a = [os.fsencode(x) for x in argv]
    w = split_launcher(a)
    if w is None or w.unset:   # env -u: not modelled in the copy's environment
        return b"/", {}, a, False
    return a[w.root_at], dict(w.env), a[w.root_at + 1:], w.clear


class SpeculativeCopy:
    """One running copy. Use as a context manager: leaving it always kills the copy."""

    def __init__(self, argv: Sequence, *, root: bytes = b"/", cwd: Optional[bytes] = None,
                 env: Optional[Mapping[bytes, bytes]] = None, limits: SandboxLimits = SandboxLimits(),
                 prefetch: bool = True, copy_output: Optional[bytes] = None):
        self.argv = [os.fsencode(x) for x in argv]
        self.root, self.cwd, self.env, self.limits = root, cwd, env, limits
        self.prefetch, self.copy_output = prefetch, copy_output
        self.prefetched: List[PrefetchedFile] = []
        self.totals: Dict[str, int] = {}
        self.exit_status: Optional[int] = None
        self.init_pid: Optional[int] = None
        self.killed_reason: Optional[str] = None
        self.errors = b""
        self._proc: Optional[subprocess.Popen] = None
        self._reader: Optional[threading.Thread] = None
        self._started = threading.Event()
        self._frozen = False

    def command(self) -> List[bytes]:
        L = self.limits
        cmd = [os.fsencode(str(helper_binary(HELPER))), b"--root", self.root,
               b"--ra-max", b"%d" % L.ra_max, b"--budget", b"%d" % L.budget,
               b"--data-max", b"%d" % L.data_max, b"--tmpfs-mb", b"%d" % L.tmpfs_mb,
               b"--workers", b"%d" % L.workers]
        if self.cwd:
            cmd += [b"--cwd", self.cwd]
        if not self.prefetch:
            cmd.append(b"--no-notify")
        if L.io_idle:
            cmd.append(b"--io-idle")
        if self.copy_output:
            cmd += [b"--copy-output", self.copy_output]
        return cmd + [b"--"] + self.argv

    def start(self) -> "SpeculativeCopy":
        if os.geteuid() != 0:
            raise WarmstartError("the speculative copy needs root (namespaces, mounts): run as root "
                                 "or use --mechanism online")
        self._proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, env=self.env, start_new_session=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._started.wait(timeout=5)
        return self

    def _read(self):
        for line in self._proc.stdout:
            kind, _, rest = line.rstrip(b"\n").partition(b" ")
            if kind == b"O":
                dev, ino, size, n, hexpath = rest.split(b" ")
                self.prefetched.append(PrefetchedFile(int(dev), int(ino), int(size), int(n),
                                                      bytes.fromhex(hexpath.decode())))
            elif kind == b"P":
                self.init_pid = int(rest)
                self._started.set()
            elif kind == b"T":
                self.totals = {k.decode(): int(v) for k, v in (f.split(b"=") for f in rest.split())}
            elif kind == b"X":
                self.exit_status = int(rest)
        self._started.set()

    # ---- controls --------------------------------------------------------------------------

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def pids(self) -> List[int]:
        """Host pids of every process of the copy (its namespace's init and descendants)."""
        return [] if self.init_pid is None else tree_pids(self.init_pid)

    def _sum_proc(self, fname: str, key: str, scale: int = 1, pids: Optional[List[int]] = None) -> int:
        total = 0
        for pid in self.pids() if pids is None else pids:
            try:
                with open(f"/proc/{pid}/{fname}") as f:
                    for line in f:
                        if line.startswith(key):
                            total += int(line.split()[1]) * scale
                            break
            except (OSError, ValueError, IndexError):
                pass
        return total

    def rss_bytes(self) -> int:
        return self._sum_proc("status", "VmRSS:", 1024)

    def progress_bytes(self) -> int:
        """Bytes the command's processes read through read-type calls (rchar): its progress through
        the launch. The namespace's init is left out: it only sets the sandbox up (its read of the
        start byte counted as progress, so a copy still building its mounts was judged as running)."""
        return self._sum_proc("io", "rchar:", pids=[p for p in self.pids() if p != self.init_pid])

    def _signal_all(self, sig) -> None:
        for pid in self.pids():
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def freeze(self) -> None:
        if not self._frozen:
            self._signal_all(signal.SIGSTOP)
            self._frozen = True

    def thaw(self) -> None:
        if self._frozen:
            self._signal_all(signal.SIGCONT)
            self._frozen = False

    def kill(self, reason: str = "launch ended") -> None:
        """End the copy now: its init gets SIGKILL, which ends its whole pid namespace."""
        if self._proc is None:
            return
        if self.killed_reason is None and self.running():
            self.killed_reason = reason
        if self.init_pid is not None:
            try:
                os.kill(self.init_pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()  # the supervisor: its death kills init too (PDEATHSIG)
            self._proc.wait()
        if not self._proc.stderr.closed:  # a second kill (cost/benefit, then launch end) finds it read
            self.errors = self._proc.stderr.read() or b""
            self._proc.stderr.close()
        if self._reader is not None:
            self._reader.join(timeout=5)

    def wait(self, timeout: float) -> Optional[int]:
        try:
            self._proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        if self._reader is not None:
            self._reader.join(timeout=5)
        return self.exit_status

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.kill()
        return False


def wait_gone(pids: Sequence[int], timeout: float = 2.0) -> List[int]:
    """Pids of `pids` still alive after timeout (zombies count as gone)."""
    deadline = time.monotonic() + timeout
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if running(p)]
        if alive:
            time.sleep(0.01)
    return alive
