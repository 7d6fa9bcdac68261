"""Python side of build/warmstart-probe: time O_DIRECT reads of byte ranges on a device.

The C helper does the I/O (libaio, aligned buffers, the given order); this module feeds it the
ranges, parses its JSON and turns its failures into WarmstartError with the fix.
"""

import json
import os
import subprocess
from dataclasses import dataclass
from typing import List, Sequence, Tuple

from .. import devices
from ..errors import WarmstartError
from ..paths import helper_binary

EXIT_NO_DIRECT = 3  # the helper's exit code when O_DIRECT open fails


@dataclass
class ProbeResult:
    elapsed_s: float
    request_s: List[float]
    bytes: int
    runs_s: List[float]


def device_path(dev: int) -> str:
    """/dev node of a block device number, or a WarmstartError saying what to do."""
    node = devices.device_node(dev)
    if node is None:
        raise WarmstartError(f"no block device {os.major(dev)}:{os.minor(dev)} on this machine "
                             f"(was it a loop device that is gone?): bring the device back or use --probe model")
    return node


def run(path: str, ranges: Sequence[Tuple[int, int]], qd: int = 1, repeat: int = 1) -> ProbeResult:
    """Read [(byte offset, byte length), ...] from path in this order with O_DIRECT."""
    exe = str(helper_binary("warmstart-probe"))
    text = "".join(f"{o} {n}\n" for o, n in ranges)
    p = subprocess.run([exe, "-q", str(qd), "-r", str(repeat), path], input=text.encode(),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    err = p.stderr.decode(errors="replace").strip()
    if p.returncode == EXIT_NO_DIRECT:
        raise WarmstartError(f"{err}: this device cannot be timed directly; "
                             f"use --probe model (after `warmstart profile-disk`)")
    if p.returncode != 0:
        raise WarmstartError(f"timing probe failed on {path}: {err or 'exit ' + str(p.returncode)}")
    d = json.loads(p.stdout)
    return ProbeResult(d["elapsed_ns"] / 1e9, [t / 1e9 for t in d["requests"]], d["bytes"],
                       [t / 1e9 for t in d["runs"]])


def check_direct(path: str) -> None:
    """Raise WarmstartError unless path can be opened with O_DIRECT (reads nothing)."""
    exe = str(helper_binary("warmstart-probe"))
    p = subprocess.run([exe, "-n", path], input=b"", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if p.returncode != 0:
        err = p.stderr.decode(errors="replace").strip()
        raise WarmstartError(f"{err}: use --probe model (after `warmstart profile-disk`) instead of disk probes")


def device_size(path: str) -> int:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.lseek(fd, 0, os.SEEK_END)
    finally:
        os.close(fd)
