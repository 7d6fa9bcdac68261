"""Run and talk to hddsim, the FUSE disk model (scripts/hddsim): start, stats, reset, stop.

hddsim exposes the backing image as `<dir>/disk` (timed by the model) and `<dir>/stats`
(`key value` lines; writing `reset` to it zeroes the counters).
"""

import os
import subprocess
import time
from pathlib import Path
from typing import Dict, List, Optional

from ..errors import WarmstartError
from ..paths import helper_binary
from . import sysops

STAT_KEYS = ("requests", "reads", "writes", "seeks", "bytes_read", "bytes_written", "busy_ns")


def binary() -> Path:
    return Path(helper_binary("hddsim"))


def start(fuse_dir: Path, image: Path, model: str, stroke_bytes: Optional[int],
          extra_args: List[str], log: Path) -> int:
    """Start hddsim in its own session (it outlives this process); returns its pid once mounted."""
    argv = [str(binary()), "--profile", model, "--image", str(image)]
    if stroke_bytes:
        argv += ["--stroke-bytes", str(stroke_bytes)]
    argv += list(extra_args) + [str(fuse_dir)]
    fuse_dir.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as logf:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
                                start_new_session=True)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise WarmstartError(f"hddsim exited with {proc.returncode} before mounting {fuse_dir}: "
                                 f"{_tail(log)}; check /dev/fuse and fusermount3 (make deps)")
        if sysops.is_mounted(fuse_dir) and (fuse_dir / "disk").exists():
            return proc.pid
        time.sleep(0.02)
    sysops.stop_process(proc.pid, "hddsim")
    raise WarmstartError(f"hddsim did not mount {fuse_dir} within 10 s: {_tail(log)}")


def _tail(log: Path) -> str:
    try:
        return log.read_bytes()[-400:].decode(errors="replace").strip() or "(no output)"
    except OSError:
        return "(no log)"


def read_stats(fuse_dir: Path) -> Dict[str, int]:
    try:
        text = (fuse_dir / "stats").read_text()
    except OSError as e:
        raise WarmstartError(f"cannot read {fuse_dir}/stats: {e.strerror}; "
                             f"is the disk up? (scripts/emu-disk up)")
    stats = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if value:
            stats[key] = int(value) if value.lstrip("-").isdigit() else float(value)
    missing = [k for k in STAT_KEYS if k not in stats]
    if missing:
        raise WarmstartError(f"{fuse_dir}/stats lacks {missing}: hddsim and warmstart versions "
                             f"differ; rebuild with `make build`")
    return stats


def reset_stats(fuse_dir: Path) -> None:
    fd = os.open(fuse_dir / "stats", os.O_WRONLY)
    try:
        os.write(fd, b"reset\n")
    finally:
        os.close(fd)


def stop(fuse_dir: Path, pid: Optional[int]) -> None:
    """Unmount the FUSE file system (the daemon then exits) and make sure the daemon is gone."""
    if sysops.is_mounted(fuse_dir):
        if subprocess.run(["fusermount3", "-u", str(fuse_dir)], capture_output=True).returncode != 0:
            sysops.unmount(os.fsencode(str(fuse_dir)))
    sysops.stop_process(pid, "hddsim")
