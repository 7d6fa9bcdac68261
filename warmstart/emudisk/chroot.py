"""Make an image runnable as a chroot: /proc, /dev and a private /tmp inside it.

They are plain mounts under the image's mount point, so tearing the disk down (which unmounts
everything below the mount point, deepest first) removes them too.
"""

from pathlib import Path
from typing import Dict, List, Optional

from . import sysops

CLEAN_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"


def mount_api(root: Path) -> None:
    for sub, argv in (("proc", ["mount", "-t", "proc", "proc"]),
                      ("dev", ["mount", "--bind", "/dev"]),
                      ("tmp", ["mount", "-t", "tmpfs", "-o", "mode=1777,size=256m", "tmpfs"])):
        target = root / sub
        target.mkdir(mode=0o755, exist_ok=True)
        if not sysops.is_mounted(target):
            sysops.run(argv + [str(target)], fix=f"check `dmesg | tail`; cannot prepare the chroot {root}")


def argv(root: Path, command: List[str], env: Optional[Dict[str, str]] = None) -> List[str]:
    """`env -i ... chroot root command`: the host's environment (pyenv, PYTHONPATH) stays out."""
    variables = {"PATH": CLEAN_PATH, "LANG": "C.UTF-8", "HOME": "/tmp"}
    variables.update(env or {})
    return ["env", "-i"] + [f"{k}={v}" for k, v in variables.items()] + ["chroot", str(root)] + list(command)
