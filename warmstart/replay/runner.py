"""run_launch(): launch an app with its schedule replayed, measure it, store the launch.

`warmstart run` and `warmstart bench` both call it. The launch time counts from before the
replayer starts (the pre-buffer is part of what the user waits for) to the launch end that
launching.py detects.
"""

import os
import tempfile
import time
from dataclasses import dataclass, field
from typing import Optional, Sequence

from ..db import launches
from ..db.recordings import find_app_by_signature, get_app
from ..db.schedules import load_active_schedule
from ..errors import WarmstartError
from ..launching import Until, launch, resolve_command
from ..signature import signature_argv
from .export import write_export
from .pageuse import UseTracer
from .process import DEFAULT_ENGINE, MODES, ReplayProcess


@dataclass
class LaunchOutcome:
    app_name: Optional[str]
    mode: str                      # what was asked: segmented | reorder | interleave | none
    prefetched: bool               # the replayer ran and released the app with "ready"
    launch_time_s: float           # replayer start (or fork, without prefetch) -> launch end
    app_time_s: float              # fork -> launch end
    prebuffer_s: float             # replayer start -> release (0 without prefetch)
    exit_status: Optional[int]
    end_reason: str
    output: bytes = b""
    notes: list = field(default_factory=list)
    replay_stats: Optional[dict] = None
    launch_id: Optional[int] = None
    page_use: Optional[dict] = None   # measure_use: accuracy/waste (pageuse.py)

    def to_json(self) -> dict:
        d = dict(self.__dict__)
        d["output"] = self.output.decode("utf-8", "surrogateescape")
        return d


def find_app(conn, argv: Sequence[str], name: Optional[str] = None) -> Optional[dict]:
    """The apps row for --name, else the first recorded with argv's executable and signature
    (signature.py: two command lines that differ only in other arguments are one app, to `run`
    as to the hook)."""
    if name is not None:
        row = get_app(conn, name)
        if row is None:
            raise WarmstartError(f"no app named {name!r}: record it with "
                                 f"`warmstart record --name {name} -- CMD`, or drop --name")
        return dict(row)
    exe = resolve_command(argv)
    return find_app_by_signature(conn, exe, signature_argv(exe, argv))


def run_launch(conn, argv: Sequence[str], mode: str = "segmented", until: Until = Until("exit"), *,
               name: Optional[str] = None, engine: str = DEFAULT_ENGINE, replay_args: Sequence[str] = (),
               timeout: float = 120.0, passthrough: bool = True, kill_at_end: bool = True,
               store: bool = True, record_mode: Optional[str] = None, disk: Optional[str] = None,
               bench_id: Optional[str] = None, uid: Optional[int] = None,
               gid: Optional[int] = None, measure_use: bool = False) -> LaunchOutcome:
    """Launch argv, prefetching its active schedule in `mode` (or not at all for "none").

    record_mode: the mode stored in launches (bench stores "cold"/"warm" for mode "none").
    An unknown app, an app without a schedule, or a refused schedule: the app is launched
    normally and the reason is in .notes. Raises WarmstartError only if argv cannot run.
    measure_use: trace which pages of the schedule's files the launch used (pageuse.py) and
    store used/prefetched/prefetched-used bytes (file pages only); needs root and tracefs.
    """
    if mode not in MODES + ("none",):
        raise WarmstartError(f"unknown mode {mode!r}: use segmented, reorder, interleave or none")
    app = find_app(conn, argv, name)
    notes, schedule = [], None
    if app is None:
        notes.append("unknown app: launched without prefetch (record it with `warmstart record -- CMD`)")
    elif mode != "none":
        schedule = load_active_schedule(conn, app["name"])
        if schedule is None:
            notes.append(f"app {app['name']!r} has no schedule yet: launched without prefetch "
                         f"(run `warmstart analyze {app['name']}`)")
    use = UseTracer(schedule if measure_use else None)
    rp, t0 = None, time.monotonic_ns()
    ready = False
    with tempfile.TemporaryDirectory(prefix="warmstart-run-") as tmp, use:
        try:
            if schedule is not None:
                export = write_export(schedule, os.path.join(tmp, "schedule.wsr"))
                rp = ReplayProcess(export.path, mode, engine, replay_args, uid=uid, gid=gid)
                t0 = time.monotonic_ns()
                rp.start()
                ready = rp.wait_ready(timeout)
            result = launch(argv, until, timeout, passthrough=passthrough, kill_at_end=kill_at_end)
            use.stop()
            stats = rp.finish(timeout) if rp else None
        except BaseException:
            if rp is not None:
                rp.abort()
            raise
    if rp is not None and not ready:
        why = (stats or {}).get("error") or (stats or {}).get("stderr") or "replayer ended early"
        notes.append(f"prefetch failed, launched without it: {why}")
    outcome = LaunchOutcome(
        app_name=app["name"] if app else None, mode=mode, prefetched=ready,
        launch_time_s=(result.end_ns - min(t0, result.start_ns)) / 1e9,
        app_time_s=result.launch_time_s,
        prebuffer_s=((rp.ready_ns - t0) / 1e9) if rp else 0.0,
        exit_status=result.exit_status, end_reason=result.end_reason,
        output=result.output, notes=notes, replay_stats=stats)
    page_use = use.measure(result, stats)
    if page_use is not None:
        outcome.page_use = page_use.to_json()
    if store and app is not None:
        outcome.launch_id = launches.insert_launch(
            conn, app_id=app["id"], schedule_id=schedule.id if schedule else None,
            mode=record_mode or mode, mechanism=engine if rp else None, disk=disk,
            launch_time_s=outcome.launch_time_s, exit_status=result.exit_status,
            prefetched_bytes=page_use.prefetched_bytes if page_use else (stats or {}).get("bytes_fetched"),
            used_bytes=page_use.used_bytes if page_use else None,
            prefetched_used_bytes=page_use.prefetched_used_bytes if page_use else None, bench_id=bench_id,
            details={"app_time_s": outcome.app_time_s, "prebuffer_s": outcome.prebuffer_s,
                     "end_reason": result.end_reason, "until": str(until), "notes": notes,
                     "replay": stats, "page_use": outcome.page_use})
    return outcome
