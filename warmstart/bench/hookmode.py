"""bench's `hook` mode: the launch a user actually gets. warmstartd and its learner run (a hook
tree of the bench's own, `warmstart hook install` on the bench's database); each app is then
launched plainly, with caches dropped before each, timed from outside (fork to exit, as every
other mode's app run), its output checked against the plain reference run. The learner's feedback
row of each launch is claimed for the bench run, so the hook's own verdicts (judged or not,
degraded, re-learned) stay visible next to the times.

The hook launches are spread over the repetitions, after each repetition's other modes, as every
mode is round-robin: a host whose CPU slows down during the run (seen: perlpod's warm launches
took 0.65 s and 1.49 s of CPU in one run) then slows every mode alike, not the one measured last.
warmstartd runs only during those launches (it would hook the other modes' launches too); the
learner runs throughout and sees each app's hooked launches in order, as consecutive launches.
"""

import json
import os
import re
import tempfile
import time

from ..db import launches as launches_db
from ..db.recordings import get_app
from ..db.schedules import list_schedules
from ..launching import launch


def _events(path) -> list:
    """The records of a JSON-lines log of the hook (the daemon's, the learner's)."""
    try:
        return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
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


def launches_in_rep(total: int, reps: int, rep: int) -> int:
    """How many of an app's `total` hook launches repetition `rep` (0-based) makes: spread evenly,
    the earlier repetitions taking one more where they do not divide."""
    return total // reps + (1 if rep < total % reps else 0)


class HookMode:
    """`with HookMode(...) as hook:` installs the hook (warmstartd paused), `hook.rep(r)` makes
    repetition r's hook launches of every app, and the exit uninstalls it."""

    def __init__(self, conn, cfg, dut, doc, bench_id, prepared, make_cold, activate, tick, say):
        self.conn, self.cfg, self.dut, self.doc, self.bench_id = conn, cfg, dut, doc, bench_id
        self.prepared, self.make_cold, self.activate, self.tick, self.say = prepared, make_cold, activate, tick, say
        self.made = {}       # app name -> hook launches made so far
        self.serving = {}    # app name -> (the schedule serving it after a repetition, the newest then)
        self.trials = {}     # app name -> the latest segmented-or-whole step (hook/trial.py)
        self.left = {}       # app name -> the verdict that took it off the prefetch path (stopped, relearn)

    def __enter__(self) -> "HookMode":
        from ..hook import manage, service
        from ..hook.config import load_config
        from ..hook.layout import hook_paths
        self._tmp = tempfile.TemporaryDirectory(prefix="warmstart-bench-hook-")
        self._old_root = os.environ.get("WARMSTART_HOOK_ROOT")
        os.environ["WARMSTART_HOOK_ROOT"] = self._tmp.name
        try:
            for _app, name, _argv, _ref, info in self.prepared.values():
                self.activate(self.conn, name, info["schedules"]["ours"])
            self.paths = hook_paths()
            self.hook_cfg = load_config(self.paths.config if self.paths.config.exists() else None)
            inst = manage.install(self.conn, use_systemd=False)
            service.stop(self.paths, use_systemd=False)   # paused until a repetition's hook launches
        except BaseException:
            self._restore()
            raise
        self.hooked = {e["app"] for e in inst["entries"]}
        self.say(f"hook installed in {self._tmp.name}: {len(self.hooked)} app(s) hooked, "
                 f"learner pid {inst['learner']['pid']}")
        for app, name, *_ in self.prepared.values():
            if name not in self.hooked:
                self.doc["problems"].append(f"{app.name} hook: not in the hook index "
                                            f"({[s['reason'] for s in inst['skipped'] if s['app'] == name]})")
        return self

    def rep(self, rep: int) -> None:
        """Repetition rep's hook launches: the hook's schedules active again (the matrix activates
        its own per mode) and in the index, warmstartd running only meanwhile."""
        from ..hook import manage, service
        todo = [p for p in self.prepared.values()
                if p[1] in self.hooked and launches_in_rep(self.cfg.hook_launches, self.cfg.reps, rep)]
        if not todo:
            return
        for _app, name, _argv, _ref, info in todo:
            self.activate(self.conn, name, self._served(name, info))
        manage.refresh(self.conn, self.paths)
        service.start(self.paths, use_systemd=False, cfg=self.hook_cfg)
        try:
            for app, name, argv, ref, info in todo:
                for _ in range(launches_in_rep(self.cfg.hook_launches, self.cfg.reps, rep)):
                    self._launch(app, name, argv, ref, info)
        finally:
            service.stop(self.paths, use_systemd=False)
        for _app, name, *_ in todo:
            rows = list_schedules(self.conn, name)
            self.serving[name] = (next((s["id"] for s in rows if s["active"]), None), max(s["id"] for s in rows))

    def _served(self, name: str, info: dict) -> int:
        """The schedule the hook serves app name: the one that served it at the end of the last
        repetition with hook launches (the learner's choice: segmented or whole), or ours; a
        schedule newer than all the bench analyzed and than that, the learner's (a relearn,
        analyzed during the hook launches or after them)."""
        newest = max(s["id"] for s in list_schedules(self.conn, name))
        active, newest_then = self.serving.get(name, (None, max(info["schedules"].values())))
        return newest if newest > newest_then else (active or info["schedules"]["ours"])

    def _index_loads(self) -> int:
        """How many times warmstartd has loaded its index (its log's lines saying so)."""
        try:
            return len(re.findall(r"\bindex \S+: \d+ entries, \d+ file watches", self.paths.log.read_text()))
        except FileNotFoundError:
            return 0

    def _wait_trial(self, name: str, row, loads: int) -> None:
        """A verdict that changed the app's schedule (segmented or whole): wait for the learner
        to have refreshed the index and warmstartd to have loaded it (`loads`: its loads before
        the launch), so that the next launch is served as it decided, and made cold after the
        daemon's reload, which looks up every scheduled file again to watch it."""
        t = (row["details"].get("feedback") or {}).get("trial")
        if not t:
            return
        self.trials[name] = t
        if t.get("active") is None:
            return
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if any(e.get("event") == "trial" and e.get("segmented") == t["segmented"] and
                   e.get("state") == t["state"] for e in _events(self.paths.learner_events)) \
                    and self._index_loads() > loads:
                return
            time.sleep(0.2)
        self.doc["problems"].append(f"the index was not refreshed and reloaded after the trial step {t}")

    def _launch(self, app, name, argv, ref, info) -> None:
        conn, cfg = self.conn, self.cfg
        i = self.made.get(name, 0)
        self.made[name] = i + 1
        app_id = get_app(conn, name)["id"]
        where = f"{app.name} hook launch {i + 1}"
        last = launches_db.last_launch_id(conn)
        n_events, loads = len(_events(self.paths.events)), self._index_loads()
        self.make_cold(self.dut)
        out = launch(argv, timeout=cfg.timeout, passthrough=False)
        t = (out.end_ns - out.start_ns) / 1e9
        ev = [e for e in _events(self.paths.events)[n_events:] if e.get("event") == "launch"]
        outcome = ev[-1]["outcome"] if ev else "not hooked"
        row = _wait_feedback(conn, app_id, last) if ev and ev[-1].get("stats") else None
        if row is not None:
            self._wait_trial(name, row, loads)
        details = {"rep": i, "outside_s": t, "app_cpu_s": out.cpu_s, "host_steal_s": out.steal_s, "outcome": outcome,
                   "held_ms": ev[-1].get("held_ms") if ev else None,
                   "exec_to_exit_s": row["launch_time_s"] if row else None}
        if row is not None:
            launches_db.claim_launch(conn, row["id"], bench_id=self.bench_id, disk=cfg.label,
                                     launch_time_s=t, exit_status=out.exit_status, extra=details)
        else:
            # what the user got, prefetched or not: counted in the hook's times
            launches_db.insert_launch(conn, app_id=app_id, mode="hook", disk=cfg.label,
                                      launch_time_s=t, exit_status=out.exit_status,
                                      bench_id=self.bench_id, details={"bench": details})
        if out.exit_status != ref.exit_status:
            self.doc["problems"].append(f"{where}: exit status {out.exit_status}, plain run {ref.exit_status}")
        elif out.output != ref.output:
            self.doc["problems"].append(f"{where}: output differs from the plain run's")
        if outcome not in ("ready", "deadline"):
            if name in self.left:   # what the learner decided: an outcome, not a fault
                outcome = f"{self.left[name]} by the feedback"
            else:
                self.doc["problems"].append(f"{where}: not prefetched ({outcome})")
        action = ((row["details"].get("feedback") or {}).get("action") if row is not None else None)
        if action in ("stopped", "relearn"):
            self.left.setdefault(name, action)
        info.setdefault("hook_outcomes", []).append(outcome)
        self.tick(f"hook {app.name} {i + 1}")

    def __exit__(self, *exc) -> None:
        from ..hook import manage
        try:
            status = manage.status(self.conn)
            # the database's other apps (other disks' runs) have their own verdicts: not this run's
            mine = {name for _app, name, *_ in self.prepared.values()}
            ours = {k: v for k, v in (status.get("degraded") or {}).items() if k in mine}
            self.doc["hook"] = {"launches_per_app": self.cfg.hook_launches, "degraded": ours, "trials": self.trials,
                                "index_apps": (status.get("index") or {}).get("apps")}
        finally:
            try:
                manage.uninstall()
            finally:
                self._restore()

    def _restore(self) -> None:
        if self._old_root is None:
            os.environ.pop("WARMSTART_HOOK_ROOT", None)
        else:
            os.environ["WARMSTART_HOOK_ROOT"] = self._old_root
        self._tmp.cleanup()
