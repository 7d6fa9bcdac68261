"""Samples one launch for the timeline figure: CPU busy, disk busy, and each request's LBA.

CPU busy is system-wide (/proc/stat, as a share of all CPUs) because the replayer's CPU counts
too; disk busy is the device's io_ticks (/sys/block/DEV/stat); LBAs come from the recorder's
tracefs block backend, for every request on the device (the replayer's and the app's alike).
Sampling costs a read of two small files every PERIOD_S; bench uses it on one repetition only.
"""

import os
import threading
import time
from pathlib import Path
from typing import Optional

PERIOD_S = 0.005


def _cpu_jiffies():
    """(busy, total) jiffies over all CPUs."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + (v[4] if len(v) > 4 else 0)  # idle + iowait: waiting for the disk is not CPU work
    return sum(v) - idle, sum(v)


def _io_ticks(stat_path: Path) -> int:
    """Milliseconds the device had I/O in flight (field 10 of the block stat file)."""
    return int(stat_path.read_text().split()[9])


class LaunchSampler:
    """with LaunchSampler(dev_name, dev_t) as s: <launch>; then s.timeline(t0_ns, segments)."""

    def __init__(self, block_name: str, dev: int, trace_lbas: bool = True):
        self.stat_path = Path("/sys/block") / block_name / "stat"
        self.dev = dev
        self.trace_lbas = trace_lbas
        self.cpu, self.disk = [], []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._backend = None
        self.note = None
        self.start_ns = 0

    def __enter__(self):
        if self.trace_lbas:
            try:
                from ..recorder.tracefs import tracefs_root
                from ..recorder.tracefs_backend import TracefsBlockBackend
                root = tracefs_root()
                self._backend = TracefsBlockBackend(root).__enter__()
                self._backend.start()
            except Exception as e:  # the figure loses its LBA dots, the measurement is unaffected
                self._backend = None
                self.note = f"no LBA trace: {e}"
        self.start_ns = time.monotonic_ns()
        self._thread.start()
        return self

    def _run(self):
        busy0, total0 = _cpu_jiffies()
        ticks0 = _io_ticks(self.stat_path)
        nxt = time.monotonic()
        while not self._stop.is_set():
            nxt += PERIOD_S
            time.sleep(max(0.0, nxt - time.monotonic()))
            busy, total = _cpu_jiffies()
            ticks = _io_ticks(self.stat_path)
            # /proc/stat moves in 10 ms jiffies: a 5 ms sample is often 0 or 1 jiffy, so the
            # figure shows the CPU share smoothed over the last two samples.
            self.cpu.append((busy - busy0) / (total - total0) if total > total0 else
                            (self.cpu[-1] if self.cpu else 0.0))
            if total > total0:
                busy0, total0 = busy, total
            self.disk.append(min(1.0, (ticks - ticks0) / (PERIOD_S * 1000)))
            ticks0 = ticks

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.requests = []
        if self._backend is not None:
            try:
                self._backend.stop()
                self.requests = [r for r in self._backend.requests() if r.dev == self.dev]
            finally:
                self._backend.__exit__(None, None, None)
        return False

    def timeline(self, dev_sectors: Optional[int], segments_end_ns=(), t0_ns: Optional[int] = None) -> dict:
        """The series for figures.timeline, times relative to t0_ns (default: sampling start)."""
        t0 = self.start_ns if t0_ns is None else t0_ns
        shift = (self.start_ns - t0) / 1e9
        pad = max(0, int(round(shift / PERIOD_S)))  # samples start slightly after t0
        return {"period_s": PERIOD_S, "cpu": [0.0] * pad + self.cpu, "disk": [0.0] * pad + self.disk,
                "cpu_what": "CPU busy, % of all CPUs (system-wide)",
                "requests": [[(r.issue_ns - t0) / 1e9, r.sector] for r in self.requests if r.issue_ns >= t0],
                "segments_s": [(t - t0) / 1e9 for t in segments_end_ns if t and t > t0],
                "dev_sectors": dev_sectors, "note": self.note}


def block_name(dev_path: str) -> str:
    return os.path.basename(os.path.realpath(dev_path))
