"""Build the hook index from the database: one entry per app with an active, fresh schedule.

Each schedule is exported (.wsr, warmstart/replay/export.py) next to the index, because the
daemon hands the replayer a file, never the database.
"""

import json
import math
import os
from dataclasses import dataclass
from typing import List, Tuple

from ..db.schedules import load_active_schedule
from ..errors import WarmstartError
from ..replay.export import write_export
from .config import HookConfig
from .index import Index, IndexEntry
from .layout import HookPaths
from .signature import needles, unwrap_launcher


@dataclass
class Skipped:
    app: str
    reason: str


def hold_ms_for(prebuffer_disk_s: float, cfg: HookConfig) -> int:
    """How long an exec may wait for its pre-buffer: a multiple of its disk time, bounded."""
    ms = math.ceil(prebuffer_disk_s * 1000.0 * cfg.hold_factor)
    return int(min(max(ms, cfg.min_hold_ms, 1), cfg.max_hold_ms))


def build_index(conn, paths: HookPaths, cfg: HookConfig) -> Tuple[Index, List[Skipped]]:
    index = Index(max_hold_ms=cfg.max_hold_ms)
    skipped: List[Skipped] = []
    os.makedirs(paths.schedules, mode=0o755, exist_ok=True)
    for app in conn.execute("SELECT * FROM apps ORDER BY id").fetchall():
        name = app["name"]
        exe = bytes(app["executable"])
        argv = [a.encode("utf-8", "surrogateescape") for a in json.loads(app["argv_json"])]
        ident = (app["exe_dev"], app["exe_ino"], app["exe_size"] or 0, app["exe_mtime_ns"] or 0)
        wrapped = unwrap_launcher(argv)
        if not wrapped and argv and os.path.basename(argv[0]) in (b"env", b"chroot"):
            # hooking env or chroot itself would replay this app on every use of them
            skipped.append(Skipped(name, "launched through env/chroot whose target is missing "
                                         "(is the chroot's disk mounted?)"))
            continue
        if wrapped:
            # `env ... chroot ROOT CMD`: the kernel opens CMD inside ROOT, so hook that file, with
            # its identity as of now (the recorded identity is env's) and the argv CMD gets
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
        export = paths.schedules / f"{sched.id}.wsr"
        try:
            write_export(sched, export)
            os.chmod(export, 0o644)
        except OSError as e:
            raise WarmstartError(f"cannot write schedule export {export}: {e.strerror}; run as root")
        first = sched.segments[0].t_disk_s if sched.segments else 0.0
        index.entries.append(IndexEntry(
            dev=ident[0], ino=ident[1], size=ident[2], mtime_ns=ident[3], schedule_id=sched.id, exe=exe,
            schedule=os.fsencode(export), name=name, needles=needles(exe, argv),
            files=tuple(f.path for f in sched.files if f.path.startswith(b"/")),
            hold_ms=hold_ms_for(first, cfg)))
    return index, skipped
