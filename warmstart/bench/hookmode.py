"""bench's `hook` mode: the launch a user actually gets. warmstartd and its learner run (a hook
tree of the bench's own, `warmstart hook install` on the bench's database); each app is then
launched plainly, `hook_launches` times in a row with caches dropped before each, timed from
outside (fork to exit, as every other mode's app run), its output checked against the plain
reference run. The learner's feedback row of each launch is claimed for the bench run, so the
hook's own verdicts (judged or not, degraded, re-learned) stay visible next to the times.

It runs after the round-robin matrix: the daemon would hook the other modes' launches too.
"""

import json
import os
import tempfile
import time

from ..db import launches as launches_db
from ..db.recordings import get_app
from ..launching import launch


def _events(paths) -> list:
    try:
        return [json.loads(x) for x in paths.events.read_text().splitlines() if x.strip()]
    except FileNotFoundError:
        return []


def _wait_feedback(conn, app_id: int, after_id: int, timeout_s: float = 150.0):
    """The learner's row for the launch just made (its replayer reports at the app's exit)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        row = launches_db.unclaimed_hook_launch(conn, app_id, after_id)
        if row is not None:
            return row
        time.sleep(0.2)
    return None


def run_hook_mode(conn, cfg, dut, doc, bench_id, prepared, make_cold, activate, tick, say) -> None:
    from ..hook import manage
    from ..hook.layout import hook_paths
    with tempfile.TemporaryDirectory(prefix="warmstart-bench-hook-") as root:
        old_root = os.environ.get("WARMSTART_HOOK_ROOT")
        os.environ["WARMSTART_HOOK_ROOT"] = root
        try:
            for _app, name, _argv, _ref, info in prepared.values():
                activate(conn, name, info["schedules"]["ours"])
            paths = hook_paths()
            inst = manage.install(conn)
            hooked = {e["app"] for e in inst["entries"]}
            say(f"hook installed in {root}: {len(hooked)} app(s) hooked, learner pid {inst['learner']['pid']}")
            for app, name, argv, ref, info in prepared.values():
                if name not in hooked:
                    doc["problems"].append(f"{app.name} hook: not in the hook index "
                                           f"({[s['reason'] for s in inst['skipped'] if s['app'] == name]})")
                    continue
                app_id = get_app(conn, name)["id"]
                for i in range(cfg.hook_launches):
                    where = f"{app.name} hook launch {i + 1}"
                    last = launches_db.last_launch_id(conn)
                    n_events = len(_events(paths))
                    make_cold(dut)
                    out = launch(argv, timeout=cfg.timeout, passthrough=False)
                    t = (out.end_ns - out.start_ns) / 1e9
                    ev = [e for e in _events(paths)[n_events:] if e.get("event") == "launch"]
                    outcome = ev[-1]["outcome"] if ev else "not hooked"
                    row = _wait_feedback(conn, app_id, last) if ev and ev[-1].get("stats") else None
                    details = {"rep": i, "outside_s": t, "outcome": outcome,
                               "held_ms": ev[-1].get("held_ms") if ev else None,
                               "exec_to_exit_s": row["launch_time_s"] if row else None}
                    if row is not None:
                        launches_db.claim_launch(conn, row["id"], bench_id=bench_id, disk=cfg.label,
                                                 launch_time_s=t, exit_status=out.exit_status, extra=details)
                    else:
                        # what the user got, prefetched or not: counted in the hook's times
                        launches_db.insert_launch(conn, app_id=app_id, mode="hook", disk=cfg.label,
                                                  launch_time_s=t, exit_status=out.exit_status,
                                                  bench_id=bench_id, details={"bench": details})
                    if out.exit_status != ref.exit_status:
                        doc["problems"].append(f"{where}: exit status {out.exit_status}, plain run {ref.exit_status}")
                    elif out.output != ref.output:
                        doc["problems"].append(f"{where}: output differs from the plain run's")
                    if outcome not in ("ready", "deadline"):
                        doc["problems"].append(f"{where}: not prefetched ({outcome})")
                    info.setdefault("hook_outcomes", []).append(outcome)
                    tick(f"hook {app.name} {i + 1}")
            status = manage.status(conn)
            # the database's other apps (other disks' runs) have their own verdicts: not this run's
            mine = {name for _app, name, *_ in prepared.values()}
            ours = {k: v for k, v in (status.get("degraded") or {}).items() if k in mine}
            doc["hook"] = {"launches_per_app": cfg.hook_launches, "degraded": ours,
                           "index_apps": (status.get("index") or {}).get("apps")}
        finally:
            manage.uninstall()
            if old_root is None:
                os.environ.pop("WARMSTART_HOOK_ROOT", None)
            else:
                os.environ["WARMSTART_HOOK_ROOT"] = old_root
