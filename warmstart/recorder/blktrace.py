"""The blktrace backend: the blktrace tool's relay interface, parsed from blkparse's output.

Whether it works is found out by trying: BLKTRACESETUP on the device, then opening the relay
file debugfs/block/<dev>/trace0 (which fails with EPERM on some kernels, e.g. under lockdown).
blkparse times are relative to its first event; we align them to CLOCK_MONOTONIC with a marker
request: a 4 KiB O_DIRECT read of sector 0 issued by the recorder at a known time (the marker is
the recorder's own I/O, so attribution drops it like any other request of ours).
"""

import ctypes
import errno
import fcntl
import mmap
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from typing import List, Optional, Sequence

from ..errors import WarmstartError
from .backend import BlockBackend
from .events import Event, assemble_requests
from ..devices import device_node
from ..model import BlockRequest

DEBUGFS = "/sys/kernel/debug"


class _Setup(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * 32), ("act_mask", ctypes.c_uint16), ("buf_size", ctypes.c_uint32),
                ("buf_nr", ctypes.c_uint32), ("start_lba", ctypes.c_uint64), ("end_lba", ctypes.c_uint64),
                ("pid", ctypes.c_uint32)]


def _ioc(direction, nr, size):
    return (direction << 30) | (size << 16) | (0x12 << 8) | nr


BLKTRACESETUP = _ioc(3, 115, ctypes.sizeof(_Setup))
BLKTRACETEARDOWN = _ioc(0, 118, 0)


def dev_node(dev: int) -> str:
    """/dev node of a block dev_t, from sysfs."""
    node = device_node(dev)
    if node is None:
        raise WarmstartError(f"no block device {os.major(dev)}:{os.minor(dev)}; pass an existing --device")
    return node


def blktrace_unavailable(devices: Sequence[int]) -> Optional[str]:
    """None if the blktrace relay interface works for all devices, else why not (one line)."""
    if not devices:
        return "it needs the devices up front and none is known: pass --device"
    if not shutil.which("blktrace") or not shutil.which("blkparse"):
        return "blktrace/blkparse not installed: apt-get install blktrace"
    if not os.path.isdir(os.path.join(DEBUGFS, "block")):
        return f"debugfs not mounted at {DEBUGFS}: mount -t debugfs none {DEBUGFS}"
    for dev in devices:
        node = dev_node(dev)
        try:
            fd = os.open(node, os.O_RDONLY | os.O_NONBLOCK)
        except OSError as e:
            return f"cannot open {node}: {e.strerror}"
        try:
            setup = _Setup(act_mask=0xffff, buf_size=65536, buf_nr=4)
            try:
                fcntl.ioctl(fd, BLKTRACESETUP, setup)
            except OSError as e:
                return f"BLKTRACESETUP on {node} failed: {errno.errorcode.get(e.errno, e.errno)}"
            relay = os.path.join(DEBUGFS, "block", setup.name.decode(), "trace0")
            try:
                os.close(os.open(relay, os.O_RDONLY | os.O_NONBLOCK))
            except OSError as e:
                return f"opening {relay} failed with {errno.errorcode.get(e.errno, e.errno)}"
            finally:
                try:
                    fcntl.ioctl(fd, BLKTRACETEARDOWN)
                except OSError:
                    pass
        finally:
            os.close(fd)
    return None


# --- blkparse's default output ------------------------------------------------------------
#   8,0    3        3     0.000003616   697  Q  RA 223490 + 8 [kjournald]
_BLKPARSE = re.compile(
    r"^\s*(?P<maj>\d+),(?P<min>\d+)\s+(?P<cpu>\d+)\s+(?P<seq>\d+)\s+(?P<sec>\d+)\.(?P<nsec>\d{9})\s+"
    r"(?P<pid>\d+)\s+(?P<act>[A-Z])\s+(?P<rwbs>\S+)\s+(?P<sector>\d+) \+ (?P<nr>\d+)(?: \[(?P<tail>.*)\])?\s*$")
_ACTIONS = {"Q": "block_bio_queue", "D": "block_rq_issue", "C": "block_rq_complete"}


def parse_blkparse(lines, base_ns: int = 0) -> List[Event]:
    """blkparse lines -> the same Event stream the tracefs parser yields (Q/D/C actions only),
    times shifted by base_ns. Lines of other actions and summaries are skipped."""
    out = []
    for line in lines:
        if isinstance(line, bytes):
            line = line.decode("utf-8", "replace")
        m = _BLKPARSE.match(line)
        if not m or m.group("act") not in _ACTIONS:
            continue
        name = _ACTIONS[m.group("act")]
        dev = f"{m.group('maj')},{m.group('min')}"
        pos = f"{m.group('sector')} + {m.group('nr')}"
        tail = m.group("tail") or ""
        # the same body text as the tracepoint prints, so one assembler serves both backends
        if name == "block_bio_queue":
            body = f"{dev} {m.group('rwbs')} {pos} [{tail}]"
        elif name == "block_rq_issue":
            body = f"{dev} {m.group('rwbs')} 0 () {pos} be,0,4 [{tail}]"
        else:
            body = f"{dev} {m.group('rwbs')} () {pos} be,0,4 [{tail}]"
        pid = int(m.group("pid"))
        out.append(Event(ts_ns=base_ns + int(m.group("sec")) * 1_000_000_000 + int(m.group("nsec")),
                         cpu=int(m.group("cpu")), tid=pid, tgid=None,
                         comm=tail if name != "block_rq_complete" else "", name=name,
                         body=body.encode()))
    out.sort(key=lambda e: e.ts_ns)
    return out


class BlktraceBackend(BlockBackend):
    name = "blktrace"

    def __init__(self, devices: Sequence[int]):
        self.devices = list(devices)
        self.nodes = [dev_node(d) for d in self.devices]
        self._trace = None
        self._parse = None
        self._out: List[bytes] = []
        self._reader = None
        self._marker_ns: Optional[int] = None

    def __enter__(self):
        args = ["blktrace", "-o", "-"] + [a for n in self.nodes for a in ("-d", n)]
        self._trace = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self._parse = subprocess.Popen(["blkparse", "-q", "-i", "-"], stdin=self._trace.stdout,
                                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self._trace.stdout.close()
        self._reader = threading.Thread(target=lambda: self._out.extend(self._parse.stdout), daemon=True)
        self._reader.start()
        time.sleep(0.2)  # blktrace sets up its per-CPU relay readers
        self.check()
        return self

    def start(self):
        self._marker_ns = time.monotonic_ns()
        self._marker_read()

    def _marker_read(self):
        buf = mmap.mmap(-1, 4096)  # page aligned, as O_DIRECT wants
        fd = os.open(self.nodes[0], os.O_RDONLY | os.O_DIRECT)
        try:
            os.preadv(fd, [buf], 0)
        finally:
            os.close(fd)
            buf.close()

    def check(self):
        if self._trace is not None and self._trace.poll() is not None:
            err = self._trace.stderr.read().decode(errors="replace").strip().splitlines()
            raise WarmstartError(f"blktrace stopped: {err[-1] if err else 'exit ' + str(self._trace.returncode)}; "
                                 f"use --backend tracefs")

    def stop(self):
        self._stop_tools()

    def _stop_tools(self):
        if self._trace is not None and self._trace.poll() is None:
            self._trace.send_signal(signal.SIGINT)  # blktrace tears its traces down on SIGINT
            try:
                self._trace.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._trace.kill()
                self._trace.wait()
        if self._parse is not None:
            try:
                self._parse.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._parse.kill()
                self._parse.wait()
        if self._reader is not None:
            self._reader.join(timeout=5)

    def __exit__(self, *exc):
        self._stop_tools()
        return False

    def requests(self) -> List[BlockRequest]:
        events = parse_blkparse(self._out)
        # align: the marker is the first Q of sector 0 on the first device by us
        me = threading.get_native_id()
        marker = next((e for e in events if e.name == "block_bio_queue" and e.tid == me
                       and e.body.split(b" ")[2:3] == [b"0"]), None)
        shift = (self._marker_ns - marker.ts_ns) if (marker and self._marker_ns) else 0
        for e in events:
            e.ts_ns += shift
        return assemble_requests(events)
