"""Start build/warmstart-replay and speak its protocol (see docs/replayer.md):
  notify fd  -> "start\\n" before its first read, "ready\\n" when the app may start; EOF without
                "ready" = start unprefetched
  stats fd   -> one JSON object at exit
"""

import json
import os
import select
import subprocess
import time
from typing import Optional, Sequence

from ..errors import WarmstartError
from ..paths import helper_binary

MODES = ("segmented", "reorder", "interleave")
ENGINES = ("readahead", "fadvise", "pread", "uring")
DEFAULT_ENGINE = "readahead"   # measured best on the emulated HDD: docs/replayer.md


class ReplayProcess:
    """One running replayer. Use start(), wait_ready(), finish()."""

    def __init__(self, export_path, mode: str, engine: str = DEFAULT_ENGINE, pass_fds: Sequence[int] = ()):
        """pass_fds: fds the replayer keeps (an export_path of /dev/fd/N needs N)."""
        if mode not in MODES:
            raise WarmstartError(f"unknown replay mode {mode!r}: use one of {', '.join(MODES)}")
        if engine not in ENGINES:
            raise WarmstartError(f"unknown fetch engine {engine!r}: use one of {', '.join(ENGINES)}")
        self.binary = helper_binary("warmstart-replay")
        self.export_path = export_path
        self.mode, self.engine = mode, engine
        self.pass_fds = tuple(pass_fds)
        self.proc = None
        self.ready_ns: Optional[int] = None
        self.start_ns: Optional[int] = None

    def start(self) -> "ReplayProcess":
        notify_r, notify_w = os.pipe()
        self._stats = os.fdopen(os.memfd_create("warmstart-replay-stats", os.MFD_CLOEXEC), "w+b")
        args = [str(self.binary), "--mode", self.mode, "--engine", self.engine,
                "--notify-fd", str(notify_w),
                "--stats-fd", str(self._stats.fileno()), os.fsdecode(self.export_path)]
        self.start_ns = time.monotonic_ns()
        try:
            self.proc = subprocess.Popen(args, pass_fds=(notify_w, self._stats.fileno(), *self.pass_fds),
                                         stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
        finally:
            os.close(notify_w)
        self._notify = notify_r
        return self

    def wait_ready(self, timeout: float = 120.0) -> bool:
        """Block until the replayer says the app may start. True: "ready"; False: it closed the
        fd without it (refused schedule, error) or timed out - the app starts unprefetched."""
        deadline = time.monotonic() + timeout
        buf = b""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            r, _, _ = select.select([self._notify], [], [], left)
            if not r:
                break
            chunk = os.read(self._notify, 64)
            if not chunk:
                break
            buf += chunk
            if b"ready\n" in buf:   # after "start\n" (set up, about to read)
                break
        self.ready_ns = time.monotonic_ns()
        os.close(self._notify)
        self._notify = None
        return b"ready\n" in buf

    def finish(self, timeout: float = 120.0) -> dict:
        """Wait for the replayer to end (killing it after `timeout`); return its stats JSON
        plus exit_status and stderr."""
        try:
            _, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        self._stats.seek(0)
        raw = self._stats.read()
        self._stats.close()
        try:
            stats = json.loads(raw) if raw.strip() else {"status": "error", "error": "no stats written"}
        except ValueError:
            stats = {"status": "error", "error": "unreadable stats", "raw": raw[:200].decode("latin-1")}
        stats["exit_status"] = self.proc.returncode
        stats["stderr"] = err.decode("utf-8", "replace").strip()
        return stats

    def abort(self) -> None:
        """Stop a replayer that is still running (error paths, Ctrl-C)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        fd = getattr(self, "_notify", None)
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass
        self._notify = None
