"""Disk profiles kept for the machine, one per disk model: a disk's timing is the disk's, not one
database's. A measurement that costs seconds (profile-disk: ~7 s on the emulated 7200 rpm disk,
1.4-1.5 s through a scratch file on this VM's root disk) is then made once per model, not once per
database, bench run or emulated disk.

kept_dir() (/var/cache/warmstart/profiles; env WARMSTART_PROFILE_CACHE) holds <key>.json:
{"measured_at": epoch s, "took_s", "profile": DiskProfile}. A key names everything the timing
depends on, with METHOD (bump it when profile.measure changes what it measures):
- an emulated disk: EmuDisk.model_key() (bench.matrix.ensure_profile);
- a real disk timed through a scratch file because its node refuses O_DIRECT: device_key (the
  whole disk's number, size, rotational flag and sysfs identity). Such a profile is taken for
  MAX_AGE_S at most (a VM's disk can move to other storage under the same name).
Only files owned by root or by the caller, writable by no one else, are read; a directory that
cannot be written keeps nothing (analyze measures as before).
"""

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Callable, Optional, Tuple

from .. import devices
from ..model import DiskProfile

METHOD = 2                     # 2: in-flight batches timed over >= 0.3 s (profile.best_run)
MAX_AGE_S = 7 * 86400


def kept_dir() -> Path:
    return Path(os.environ.get("WARMSTART_PROFILE_CACHE", "/var/cache/warmstart/profiles"))


def key_of(what: dict) -> str:
    return hashlib.sha256(json.dumps({**what, "method": METHOD}, sort_keys=True).encode()).hexdigest()[:16]


def device_key(dev: int) -> str:
    """The key of a real disk (the whole disk holding dev): what sysfs says identifies it."""
    disk, _ = devices.disk_of(dev)
    ident = {}
    for name in ("serial", "wwid", "device/serial", "device/wwid", "device/model", "device/vendor"):
        try:
            with open(f"{devices.sysfs_path(disk)}/{name}") as f:
                ident[name] = f.read().strip()
        except OSError:
            continue
    return key_of({"disk": f"{os.major(disk)}:{os.minor(disk)}", "bytes": devices.size_bytes(disk),
                   "rotational": devices.rotational(disk), "ident": ident})


def load(key: str, max_age_s: Optional[float] = None,
         say: Callable[[str], None] = lambda _m: None) -> Optional[Tuple[DiskProfile, dict]]:
    """(profile, {"measured_at", "took_s", "path"}) kept under key, or None (none, not trusted,
    older than max_age_s, or unreadable: say is told)."""
    path = kept_dir() / f"{key}.json"
    try:
        st = os.stat(path)
    except OSError:
        return None
    if st.st_uid not in (0, os.geteuid()) or st.st_mode & 0o022:
        return None
    try:
        kept = json.loads(path.read_text())
        prof = DiskProfile.from_json(json.dumps(kept["profile"]))
        when = float(kept["measured_at"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        say(f"ignoring the unreadable profile {path} ({type(e).__name__}): measuring again")
        return None
    if max_age_s is not None and not 0 <= time.time() - when <= max_age_s:
        return None
    return prof, {"measured_at": when, "took_s": kept.get("took_s"), "path": str(path)}


def keep(key: str, prof: DiskProfile, took_s: float, measured_at: Optional[float] = None) -> Optional[Path]:
    """Keep prof (measured at measured_at, else now) under key, atomically; the path, or None
    where it cannot be written."""
    path = kept_dir() / f"{key}.json"
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        tmp.write_text(json.dumps({"measured_at": measured_at or time.time(), "took_s": took_s,
                                   "profile": json.loads(prof.to_json())}))
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
        return path
    except OSError:
        tmp.unlink(missing_ok=True)
        return None


def when(epoch: float) -> str:
    """When a kept profile was measured, for messages."""
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(epoch))
