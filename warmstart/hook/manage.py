"""install / uninstall / status / refresh: the steps behind `warmstart hook`."""

import os
import shutil
from typing import Optional

from ..db.connection import database_file
from ..errors import WarmstartError
from . import events, feedback, preload, service, users
from .config import load_config
from .entries import build_index
from .index import Index, read_index, write_index
from .layout import HookPaths, hook_paths, system_paths


def refresh(conn, paths: Optional[HookPaths] = None) -> dict:
    """Rewrite the index (and exports) from the database; a running daemon reloads it."""
    paths = paths or hook_paths()
    cfg = load_config(paths.config if paths.config.exists() else None)
    events.sync(conn, paths)  # stale marks first, so stale schedules leave the index
    index, skipped = build_index(conn, paths, cfg)
    # warmstartd's, every entry; then the public one the shim reads: no path of a schedule
    # learned from another user's launch in it (docs/security.md)
    write_index(os.fsencode(paths.daemon_index), index, mode=0o600)
    public = Index([e for e in index.entries if e.owner_uid in (0, os.geteuid())], index.max_hold_ms)
    write_index(os.fsencode(paths.index), public,
                mode=0o600 if any(e.owner_uid for e in public.entries) else 0o644)
    in_use = {os.fsdecode(e.schedule) for e in index.entries}
    for f in paths.schedules.glob("*.wsr"):  # exports of forgotten apps and older schedules
        if str(f) not in in_use:
            f.unlink(missing_ok=True)
    for d in (paths.state, paths.schedules, paths.users):
        remove_orphaned_temp_files(d)
    launchers = {e.schedule_id: os.fsdecode(e.exe) for e in index.entries if e.launcher}
    return {"index": str(paths.index), "entries": [
        {"app": e.name, "schedule_id": e.schedule_id, "hold_ms": e.hold_ms,
         "signature": [n.decode("utf-8", "surrogateescape") for n in e.needles],
         "launcher": launchers.get(e.schedule_id)} for e in index.entries if not e.launcher],
        "skipped": [{"app": s.app, "reason": s.reason} for s in skipped], "learn": cfg.learn}


def remove_orphaned_temp_files(directory) -> None:
    """NAME.tmp.PID files (index.write_index, export.write_export, paths.replace_file, the users'
    views) of writers no longer alive: what a writer killed between writing and renaming leaves."""
    if not directory.is_dir():
        return
    for f in directory.glob("*.tmp.*"):
        pid = f.name.rpartition(".tmp.")[2]
        if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            f.unlink(missing_ok=True)


def refresh_if_installed(conn) -> Optional[dict]:
    """After `warmstart analyze`: rewrite the index if the hook is installed (an index exists),
    so the new schedule is used on the next plain launch. Never fails the analysis: a problem is
    returned as {"error": ...} for the caller to show."""
    paths = hook_paths()
    if not paths.index.exists():
        return None
    try:
        r = refresh(conn, paths)
        return {"index": r["index"], "apps": [e["app"] for e in r["entries"]]}
    except (WarmstartError, OSError) as e:
        return {"error": f"hook index not refreshed: {e}; run `warmstart hook refresh`"}


def install(conn, with_preload: bool = False, system_preload: bool = False,
            daemon: Optional[bool] = None, use_systemd: Optional[bool] = None) -> dict:
    """use_systemd: None = when systemd is PID 1 (False: started directly, as the bench does,
    which stops and starts warmstartd between its repetitions)."""
    paths = hook_paths()
    result = refresh(conn, paths)
    if daemon is None:
        daemon = os.geteuid() == 0 and not with_preload
    if daemon:
        if os.geteuid() != 0:
            raise WarmstartError("warmstartd needs root (fanotify permission events): run as root, "
                                 "or use `warmstart hook install --preload` for your own launches")
        cfg = load_config(paths.config if paths.config.exists() else None)
        db_file = database_file(conn)
        service.stop_learner(paths)  # it must not write an old offset after the new generation's
        result["generation"] = events.start_generation(paths, db_file)["id"]
        result["daemon"] = service.start(paths, use_systemd, cfg)
        result["learner"] = {"pid": service.start_learner(paths, db_file, use_systemd), "learn": cfg.learn}
    if with_preload:
        result["preload"] = preload.install(paths, system_preload)
    return result


def uninstall() -> dict:
    paths = hook_paths()
    stopped = service.stop(paths)
    service.stop_learner(paths)
    removed = []
    units = [u for u in (paths.unit, paths.learner_unit) if u.exists()]
    for u in units:
        u.unlink()
        removed.append(str(u))
    if units and service.systemd_running():
        service.systemctl("daemon-reload")
    pre = preload.uninstall(paths)
    if pre:
        removed.append(pre)
    # the daemon is stopped: its log and launch reports go too, so no later install (of this
    # database or another) can read them
    for f in (paths.index, paths.daemon_index, paths.events, paths.events_offset, paths.feedback_offset, paths.generation):
        if f.exists():
            f.unlink()
            removed.append(str(f))
    for d in (paths.schedules, paths.launches):
        if d.exists():
            shutil.rmtree(d)
            removed.append(str(d))
    return {"daemon_stopped": stopped, "removed": removed}


def status(conn=None) -> dict:
    paths = hook_paths()
    out = {"daemon": None, "index": None, "preload": preload.status(paths),
           "systemd_pid1": service.systemd_running(), "unit_installed": paths.unit.exists()}
    pid = service.running_pid(paths)
    if pid is not None:
        out["daemon"] = {"pid": pid, "stats": service.read_stats(paths)}
    out["learner"] = service.learner_running(paths)
    if paths.index.exists():
        try:
            idx = read_index(os.fsencode(paths.index), require_root=os.geteuid() == 0)
            out["index"] = {"path": str(paths.index), "entries": len(idx.entries),
                            "apps": sorted({e.name for e in idx.entries})}
        except WarmstartError as e:
            out["index"] = {"path": str(paths.index), "error": str(e)}
    if conn is not None:
        out["sync"] = events.sync(conn, paths)
        out["degraded"] = feedback.degraded(conn, load_config(paths.config if paths.config.exists() else None))
        out["hooked"] = feedback.hooked_apps(conn)
    out["launches"] = events.summary(paths)
    if os.geteuid() != 0:   # what the system hook does for this user (its own tree is above)
        out["system"] = users.view(system_paths())
    return out
