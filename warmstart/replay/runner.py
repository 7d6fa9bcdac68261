"""run_launch(): launch an app with its schedule replayed, measure it, store the launch.

Its options come in three groups: Prefetch (what to prefetch and measure), LaunchOptions (how
to launch) and StoreAs (the launches row), so a caller names only the group it changes.

`warmstart run` and `warmstart bench` both call it. The launch time counts from before the
replayer starts (the pre-buffer is part of what the user waits for) to the launch end that
launching.py detects.
"""

import os
import time
from dataclasses import dataclass, field
from typing import Callable, NamedTuple, Optional, Sequence

from ..db import launches
from ..db.recordings import find_app_by_signature, get_app
from ..db.schedules import load_active_schedule
from ..errors import WarmstartError
from ..launching import Until, host_steal_s, launch, resolve_command
from ..signature import signature_argv
from .export import export_in_memory
from .process import DEFAULT_ENGINE, MODES, ReplayProcess


@dataclass
class LaunchOutcome:
    app_name: Optional[str]
    mode: str                      # what was asked: segmented | reorder | interleave | none
    prefetched: bool               # the replayer ran and released the app with "ready"
    launch_time_s: float           # replayer start (or fork, without prefetch) -> launch end
    app_time_s: float              # fork -> launch end
    app_cpu_s: Optional[float]     # the app's user + system CPU (None: it had not exited at the end)
    host_steal_s: Optional[float]  # launching.host_steal_s over launch_time_s (None: not counted here)
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


class Prefetch(NamedTuple):
    """What to prefetch: the app's active schedule, replayed in `mode` ("none": nothing) with the
    fetch `engine`. measure_use: also trace which pages of the schedule's files the launch used
    (pageuse.py: accuracy and waste, file pages only); needs root and tracefs. fs_metadata: let the
    replayer warm XFS/btrfs metadata through the file system first (warmstart/fs/metadata.py)."""
    mode: str = "segmented"
    engine: str = DEFAULT_ENGINE
    measure_use: bool = False
    fs_metadata: bool = True


NO_PREFETCH = Prefetch("none")


class LaunchOptions(NamedTuple):
    """How to launch: until which launch end (launching.py), at most `timeout` seconds.
    passthrough: the app's output goes to ours (else it is captured in LaunchOutcome.output);
    kill_at_end: after a non-exit end, end the app's process group (False leaves it running)."""
    until: Until = Until("exit")
    timeout: float = 120.0
    passthrough: bool = True
    kill_at_end: bool = True


class StoreAs(NamedTuple):
    """The launches row the launch is stored as: `mode` (default the prefetch mode; bench stores
    "cold"/"warm" for mode "none"), the disk it ran on and the bench run it belongs to."""
    mode: Optional[str] = None
    disk: Optional[str] = None
    bench_id: Optional[str] = None


def run_launch(conn, argv: Sequence[str], prefetch: Prefetch = Prefetch(), how: LaunchOptions = LaunchOptions(),
               store: Optional[StoreAs] = StoreAs(), *, name: Optional[str] = None,
               cold: Optional[Callable[[], None]] = None) -> LaunchOutcome:
    """Launch argv as `how` says, prefetching what `prefetch` says, and store it as `store`
    (None: not stored; neither is a launch of an unknown app). name: the app (find_app).
    cold: makes the cache cold (drop_caches), called once everything the launch needs is
    prepared and nothing touches the app's files before it starts: the page-use tracer's stats of
    the schedule's files came before a cold launch, not after (on XFS and btrfs they loaded the
    inodes the launch then did not wait for: a bench launch 0.38 s instead of 0.76 s).

    An unknown app, an app without a schedule, or a refused schedule: the app is launched
    normally and the reason is in .notes. Raises WarmstartError only if argv cannot run.
    """
    mode = prefetch.mode
    if mode not in MODES + ("none",):
        raise WarmstartError(f"unknown mode {mode!r}: use segmented, reorder, interleave or none")
    app = find_app(conn, argv, name)
    schedule, notes = _schedule_to_prefetch(conn, app, mode)
    use = _use_tracer(schedule if prefetch.measure_use else None)
    # the export looks at the schedule's directories (export.py): before the cache goes cold too
    export_fd = export_in_memory(schedule, fs_metadata=prefetch.fs_metadata) if schedule is not None else None
    rp, ready = None, False
    try:
        if cold is not None:
            cold()
        t0, steal0 = time.monotonic_ns(), host_steal_s()
        with use:
            if export_fd is not None:
                rp = ReplayProcess(f"/dev/fd/{export_fd}", mode, prefetch.engine, pass_fds=(export_fd,))
                t0, steal0 = time.monotonic_ns(), host_steal_s()
                rp.start()
                os.close(export_fd)
                export_fd = None
                ready = rp.wait_ready(how.timeout)
            at_fork = host_steal_s()
            result = launch(argv, how.until, how.timeout, passthrough=how.passthrough,
                            kill_at_end=how.kill_at_end)
            use.stop()
            stats = rp.finish(how.timeout) if rp else None
    except BaseException:
        if rp is not None:
            rp.abort()
        raise
    finally:
        if export_fd is not None:
            os.close(export_fd)
    if rp is not None and not ready:
        why = (stats or {}).get("error") or (stats or {}).get("stderr") or "replayer ended early"
        notes.append(f"prefetch failed, launched without it: {why}")
    outcome = LaunchOutcome(
        app_name=app["name"] if app else None, mode=mode, prefetched=ready,
        launch_time_s=(result.end_ns - min(t0, result.start_ns)) / 1e9,
        app_time_s=result.launch_time_s, app_cpu_s=result.cpu_s,
        host_steal_s=None if None in (result.steal_s, at_fork, steal0) else result.steal_s + at_fork - steal0,
        prebuffer_s=((rp.ready_ns - t0) / 1e9) if rp else 0.0,
        exit_status=result.exit_status, end_reason=result.end_reason,
        output=result.output, notes=notes, replay_stats=stats)
    page_use = use.measure(result, stats)
    if page_use is not None:
        outcome.page_use = page_use.to_json()
    if store is not None and app is not None:
        outcome.launch_id = _store_launch(conn, app, schedule, outcome, page_use, store,
                                          mechanism=prefetch.engine if rp else None, until=how.until)
    return outcome


def _schedule_to_prefetch(conn, app: Optional[dict], mode: str):
    """(the app's active schedule or None, notes saying why there is none)."""
    if app is None:
        return None, ["unknown app: launched without prefetch (record it with `warmstart record -- CMD`)"]
    if mode == "none":
        return None, []
    schedule = load_active_schedule(conn, app["name"])
    if schedule is None:
        return None, [f"app {app['name']!r} has no schedule yet: launched without prefetch "
                      f"(run `warmstart analyze {app['name']}`)"]
    return schedule, []


def _use_tracer(schedule):
    """pageuse.UseTracer for schedule; for None (not measuring) its no-op form, without loading
    the page-use tracing (and tracefs) modules onto `warmstart run`'s start-up."""
    if schedule is None:
        return _NoUse()
    from .pageuse import UseTracer
    return UseTracer(schedule)


class _NoUse:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def stop(self) -> None:
        pass

    def measure(self, result, stats):
        return None


def _store_launch(conn, app: dict, schedule, outcome: LaunchOutcome, page_use, store: StoreAs, *,
                  mechanism: Optional[str], until: Until) -> int:
    """The launches row of outcome; its id."""
    stats = outcome.replay_stats
    return launches.insert_launch(
        conn, app_id=app["id"], schedule_id=schedule.id if schedule else None,
        mode=store.mode or outcome.mode, mechanism=mechanism, disk=store.disk,
        launch_time_s=outcome.launch_time_s, exit_status=outcome.exit_status,
        prefetched_bytes=page_use.prefetched_bytes if page_use else (stats or {}).get("bytes_fetched"),
        used_bytes=page_use.used_bytes if page_use else None,
        prefetched_used_bytes=page_use.prefetched_used_bytes if page_use else None, bench_id=store.bench_id,
        details={"app_time_s": outcome.app_time_s, "app_cpu_s": outcome.app_cpu_s,
                 "host_steal_s": outcome.host_steal_s,
                 "prebuffer_s": outcome.prebuffer_s,
                 "end_reason": outcome.end_reason, "until": str(until), "notes": outcome.notes,
                 "replay": stats, "page_use": outcome.page_use})
