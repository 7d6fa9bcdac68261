"""Build the hook index from the database: one entry per app with an active, fresh schedule.

Each schedule is exported (.wsr, warmstart/replay/export.py) next to the index, because the
daemon hands the replayer a file, never the database.
"""

import math
import os
from dataclasses import dataclass
from typing import List, Optional, Tuple

from ..db.recordings import argv_of, list_apps, recorded_launch_s, recording_owners
from ..db.schedules import load_active_schedule
from ..errors import WarmstartError
from ..replay.export import write_export
from .config import HookConfig
from .index import Index, IndexEntry
from .layout import HookPaths
from ..signature import is_wrapper, needles, unwrap_launcher


@dataclass
class Skipped:
    app: str
    reason: str


def hold_ms_for(prebuffer_disk_s: float, cold_launch_s: Optional[float], cfg: HookConfig) -> int:
    """How long an exec may wait for its pre-buffer (docs/hook.md, "Hold policy"): hold_factor x
    the pre-buffer's modelled disk time, so a pre-buffer slowed by contention still gets done;
    never more than max_hold_fraction of the app's recorded cold launch, so a hold that runs
    out cannot cost more than that share of a cold launch; never more than max_hold_ms; at
    least min_hold_ms."""
    ms = math.ceil(prebuffer_disk_s * 1000.0 * cfg.hold_factor)
    ceiling = cfg.max_hold_ms
    if cold_launch_s and cold_launch_s > 0:
        ceiling = min(ceiling, math.ceil(cold_launch_s * 1000.0 * cfg.max_hold_fraction))
    return int(max(1, min(max(ms, cfg.min_hold_ms), ceiling)))


def build_index(conn, paths: HookPaths, cfg: HookConfig) -> Tuple[Index, List[Skipped]]:
    index = Index(max_hold_ms=cfg.max_hold_ms)
    skipped: List[Skipped] = []
    os.makedirs(paths.schedules, mode=0o755, exist_ok=True)
    for app in list_apps(conn):
        name = app["name"]
        exe = bytes(app["executable"])
        argv = argv_of(app)
        ident = (app["exe_dev"], app["exe_ino"], app["exe_size"] or 0, app["exe_mtime_ns"] or 0)
        wrapped = unwrap_launcher(argv)
        launcher = None
        if not wrapped and is_wrapper(argv):
            # hooking env or chroot itself would replay this app on every use of them
            skipped.append(Skipped(name, "launched through env/chroot whose target is missing "
                                         "(is the chroot's disk mounted?)"))
            continue
        if wrapped:
            # `env ... chroot ROOT CMD`: the kernel opens CMD inside ROOT, so hook that file, with
            # its identity as of now (the recorded identity is env's) and the argv CMD gets
            launcher = (exe, argv, ident)
            exe, argv = wrapped
            st = os.stat(exe)
            ident = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        if ident[0] is None or ident[1] is None:
            skipped.append(Skipped(name, "no executable identity recorded; re-record it"))
            continue
        # the daemon never follows links it has not resolved: store the resolved path only
        if os.path.realpath(exe) != exe:
            skipped.append(Skipped(name, f"executable path {exe!r} is not fully resolved; re-record it"))
            continue
        sched = load_active_schedule(conn, name)
        if sched is None:
            skipped.append(Skipped(name, f"not analyzed: run `warmstart analyze {name}`"))
            continue
        if sched.stale:
            skipped.append(Skipped(name, f"schedule {sched.id} is stale: re-record and re-analyze {name}"))
            continue
        owner = schedule_owner(recording_owners(conn, sched.recording_ids))
        if owner is None:
            skipped.append(Skipped(name, f"schedule {sched.id} is made of launches of several users, or of one "
                                         f"learned before warmstart kept whose it was: re-record it"))
            continue
        export = paths.schedules / f"{sched.id}.wsr"
        try:
            # another user's paths are theirs: root's alone to read (the replayer loads the
            # schedule before it drops to the launching user)
            write_export(sched, export, 0o600 if owner else 0o644)
        except OSError as e:
            raise WarmstartError(f"cannot write schedule export {export}: {e.strerror}; run as root")
        cold = recorded_launch_s(conn, sched.recording_ids)
        entry = IndexEntry(
            dev=ident[0], ino=ident[1], size=ident[2], mtime_ns=ident[3], schedule_id=sched.id, exe=exe,
            schedule=os.fsencode(export), name=name, needles=needles(exe, argv),
            # watched by warmstartd for staleness: the files it reads data of, not the names it
            # only looks up, whose inodes the watches would keep in memory (docs/hook.md, "Staleness")
            files=tuple(f.path for f in sched.read_files if f.path.startswith(b"/")),
            hold_ms=hold_ms_for(sched.prebuffer_s, cold, cfg), owner_uid=owner)
        index.entries.append(entry)
        if launcher:
            index.entries.extend(launcher_entry(entry, *launcher))
    return index, skipped


def schedule_owner(owners) -> Optional[int]:
    """Whose launches a schedule made from recordings of these owners may serve: 0 (all users)
    when root made them all; the one user whose launch was recorded (learned) otherwise; None
    when several users' launches, or an unknown one's, went into it."""
    users = set(owners) - {0}
    if None in users or len(users) > 1:
        return None
    return users.pop() if users else 0


def launcher_entry(app: IndexEntry, exe: bytes, argv: List[bytes], ident) -> List[IndexEntry]:
    """An entry for the wrapper itself (`env -i ... chroot ROOT CMD`): the kernel opens the
    wrapper first, and before it gets to CMD, chroot resolves CMD's path on a cold disk (tens of
    ms on an HDD). Hooking the wrapper's exec, with its whole argv as the signature, starts the
    pre-buffer that much earlier; the daemon then lets CMD's exec of the same process through
    without a second replayer. No files: CMD's entry carries them, and its staleness is shared
    by schedule id."""
    words = []
    for a in argv[1:]:
        if not a:
            break  # an empty argument cannot be a needle; the words before it still identify the app
        words.append(a)
    if ident[0] is None or ident[1] is None or not exe.startswith(b"/") or os.path.realpath(exe) != exe:
        return []
    return [IndexEntry(dev=ident[0], ino=ident[1], size=ident[2] or 0, mtime_ns=ident[3] or 0,
                       schedule_id=app.schedule_id, exe=exe, schedule=app.schedule, name=app.name,
                       needles=tuple(words), hold_ms=app.hold_ms, launcher=True, owner_uid=app.owner_uid)]
