"""Small wrappers around the system changes an emulated disk makes: loop devices, mounts, processes.

Every function here either does its job or raises WarmstartError naming the command and the fix;
the undo functions (detach, unmount, stop) are safe to call on things already gone.
"""

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import List, Optional

from ..errors import WarmstartError
from ..mountinfo import mounts
from ..procs import running


def run(argv: List, fix: str = "", **kw) -> subprocess.CompletedProcess:
    """Run argv, raising WarmstartError with its stderr and `fix` when it fails."""
    try:
        p = subprocess.run(argv, capture_output=True, **kw)
    except FileNotFoundError:
        raise WarmstartError(f"{argv[0]} not found: run `make deps` (scripts/install-deps)") from None
    if p.returncode != 0:
        err = p.stderr.decode(errors="replace").strip()
        raise WarmstartError(f"`{' '.join(map(os.fsdecode, argv))}` failed ({p.returncode}): {err}"
                             + (f"; {fix}" if fix else ""))
    return p


# ---- mounts ---------------------------------------------------------------------------------


def mount_targets() -> List[bytes]:
    """Mount points of this mount namespace, as bytes."""
    return [m.target for m in mounts()]


def mounts_under(path: Path) -> List[bytes]:
    """Mount points at or below `path`, deepest first (the order to unmount them)."""
    base = os.fsencode(str(path)).rstrip(b"/")
    found = [t for t in mount_targets() if t == base or t.startswith(base + b"/")]
    return sorted(set(found), key=lambda t: t.count(b"/"), reverse=True)


def is_mounted(path: Path) -> bool:
    return os.fsencode(str(path)).rstrip(b"/") in mount_targets()


def unmount(target: bytes) -> None:
    """Unmount target; if it stays busy or its FUSE daemon is dead, detach it lazily."""
    for _ in range(10):
        if subprocess.run(["umount", target], capture_output=True).returncode == 0:
            return
        if not is_mounted(Path(os.fsdecode(target))):
            return
        time.sleep(0.1)
    # A dead FUSE daemon ("Transport endpoint is not connected") or a busy mount: lazy detach
    # so the name is free now and the kernel finishes when the last user goes away.
    run(["umount", "-l", target], fix=f"close the programs using {os.fsdecode(target)} (see `fuser -vm`)")


def unmount_all_under(path: Path) -> None:
    for target in mounts_under(path):
        unmount(target)


# ---- loop devices ---------------------------------------------------------------------------

def loop_attach(backing: Path, direct_io: bool) -> str:
    """Attach `backing` to a free loop device; returns '/dev/loopN'."""
    argv = ["losetup", "--find", "--show"]
    if direct_io:
        argv.append("--direct-io=on")
    argv.append(str(backing))
    out = run(argv, fix="free a loop device (losetup -D) or load the loop module (modprobe loop)")
    dev = out.stdout.decode().strip()
    if direct_io:
        dio = Path(f"/sys/block/{os.path.basename(dev)}/loop/dio").read_text().strip()
        if dio != "1":
            loop_detach(dev)
            raise WarmstartError(f"{dev}: the kernel refused direct I/O on {backing}, so block "
                                 f"requests would be cached instead of reaching the disk model")
    return dev


def loops_of(backing: Path) -> List[str]:
    """Loop devices whose backing file is `backing` (also stale ones)."""
    p = subprocess.run(["losetup", "-j", str(backing), "-O", "NAME", "-n"], capture_output=True)
    return [line.strip() for line in p.stdout.decode().splitlines() if line.strip()]


def loop_backing(dev: str) -> Optional[str]:
    try:
        return Path(f"/sys/block/{os.path.basename(dev)}/loop/backing_file").read_text().strip()
    except OSError:
        return None


def loop_detach(dev: str) -> None:
    if loop_backing(dev) is None:
        return
    # Detach can briefly fail with EBUSY right after an unmount (udev still has it open): retry.
    for _ in range(20):
        if subprocess.run(["losetup", "-d", dev], capture_output=True).returncode == 0:
            return
        if loop_backing(dev) is None:
            return
        time.sleep(0.1)
    run(["losetup", "-d", dev], fix=f"close the programs using {dev} (see `fuser -v {dev}`)")


def set_queue(dev: str, rotational: bool, scheduler: str) -> None:
    """Give the loop device the kernel's view of the disk it emulates."""
    q = Path(f"/sys/block/{os.path.basename(dev)}/queue")
    (q / "rotational").write_text("1" if rotational else "0")
    try:
        (q / "scheduler").write_text(scheduler)
    except OSError as e:
        raise WarmstartError(f"cannot set I/O scheduler {scheduler} on {dev}: {e.strerror}; "
                             f"load it (modprobe mq-deadline) or use another profile") from None


# ---- processes ------------------------------------------------------------------------------

def stop_process(pid: Optional[int], cmdline_contains: str, timeout: float = 5.0) -> None:
    """SIGTERM, then SIGKILL after timeout; only if pid is still the process we started."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 2.0)):
        if not running(pid, cmdline_contains, reap=True):
            return
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not running(pid, cmdline_contains, reap=True):
                return
            time.sleep(0.05)
