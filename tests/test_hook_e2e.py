"""The launch hook end to end on the emulated 7200 rpm disk, with real recordings, the real
analyzer and the real replayer: `warmstart hook install`, then plain launches (no wrapper).

Each test uses its own hook tree (WARMSTART_HOOK_ROOT) and database, and uninstalls the hook
(daemon stopped) on the way out. Times are medians of interleaved repetitions with the page cache
dropped before each launch (other engineers share the machine: drop_caches is global).
"""

import json
import os
import re
import stat
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import REPO, require
from test_hook_daemon import have_fanotify_perm

BUILD = REPO / "build"
REPS = int(os.environ.get("WARMSTART_HOOK_E2E_REPS", "3"))
SHARE_OF_RUNS_GAIN = 0.8   # docs/hook.md: the hook delivers 85-103 % of `warmstart run`'s gain
LEARNED_OF_FIRST = 0.5     # docs/hook.md: learned second launch 0.501 s after a recorded 1.733 s
APPS = {  # name -> python3 -c code: scattered standard-library reads, different per app
    "hk-mail": "import json, email.mime.multipart, http.client, asyncio, decimal, xml.dom.minidom, "
               "sqlite3, logging.handlers, unittest, argparse, tarfile, zipfile",
    "hk-async": "import asyncio, logging.handlers, argparse, tarfile",
    "hk-test": "import unittest, zipfile, sqlite3, csv, difflib",
}


class HookEnv:
    """The `warmstart` command against one database and one hook tree."""

    def __init__(self, tmp: Path, disk):
        self.tmp, self.disk = tmp, disk
        self.db = tmp / "warmstart.db"
        self.root = tmp / "hookroot"
        self.env = dict(os.environ, WARMSTART_HOOK_ROOT=str(self.root), PYTHONPATH=str(REPO))

    def ws(self, *args, check=True, timeout=600):
        p = subprocess.run([sys.executable, "-m", "warmstart", "--db", str(self.db), *args],
                           env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and p.returncode:
            raise AssertionError(f"warmstart {' '.join(args)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
        return p

    def wsj(self, *args, **kw):
        args = list(args)
        at = args.index("--") if "--" in args else len(args)
        return json.loads(self.ws(*args[:at], "--json", *args[at:], **kw).stdout)

    def argv(self, name):
        return self.disk.chroot_argv(["python3", "-c", APPS[name]])

    def plain(self, name):
        """A plain launch (no warmstart wrapper): wall time fork -> exit. The stopwatch runs at a
        real-time priority its children do not inherit (SCHED_RESET_ON_FORK): on a busy machine
        a normal one woke up to 28 ms after the app's exit, which is the test's error, not the
        launch's."""
        os.sched_setscheduler(0, os.SCHED_FIFO | os.SCHED_RESET_ON_FORK, os.sched_param(1))
        try:
            t0 = time.monotonic()
            p = subprocess.run(self.argv(name), capture_output=True, timeout=120)
            t = time.monotonic() - t0
        finally:
            os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
        return t, p

    def daemon(self, on: bool):
        """Start (install: refresh + start) or stop warmstartd, keeping the index. `warmstart run`
        launches are measured with the daemon stopped, else the hook would prefetch them too."""
        if on:
            self.wsj("hook", "install")
            return
        sys.path.insert(0, str(REPO))
        from warmstart.hook import service
        from warmstart.hook.layout import HookPaths
        r = self.root
        assert service.stop(HookPaths(r, r / "var/lib/warmstart", r / "run/warmstart", r / "etc"), False)

    def events(self):
        f = self.root / "var/lib/warmstart/hook-events.jsonl"
        return [json.loads(line) for line in f.read_text().splitlines()] if f.exists() else []


@pytest.fixture
def hookenv(tmp_path, emu_system):
    require(have_fanotify_perm(), "needs root and fanotify permission events")
    require((BUILD / "warmstartd").exists() and (BUILD / "warmstart-replay").exists(),
            "warmstartd / warmstart-replay not built: run `make binaries`")
    h = HookEnv(tmp_path, emu_system)
    try:
        yield h
    finally:
        h.ws("hook", "uninstall", check=False)
        pid = h.root / "run/warmstart/warmstartd.pid"
        assert not pid.exists(), "warmstartd still has a pidfile after uninstall"


# how long the daemon waits for a replayer's "start" beyond the hold, as the C code defines it
START_ALLOW_MS = int(re.search(r"#define WS_START_ALLOW_MS (\d+)u?\b",
                               (REPO / "launchd-hook" / "index.h").read_text()).group(1))


def hold_deadline_ms(event, hold_ms):
    """When the daemon releases a held exec at the latest (docs/hook.md, "Hold policy"): the
    entry's hold from its replayer's "start", which comes at most START_ALLOW_MS after the exec."""
    start = event["started_ms"]
    return hold_ms + (START_ALLOW_MS if start is None else min(start, START_ALLOW_MS))


def wait_for_hook_rows(h, n, timeout=30):
    sys.path.insert(0, str(REPO))
    from warmstart.db.connection import open_db
    from warmstart.db.launches import list_launches
    deadline = time.monotonic() + timeout
    while True:
        conn = open_db(str(h.db))
        try:
            rows = list_launches(conn, mode="hook")
        finally:
            conn.close()
        if len(rows) >= n or time.monotonic() > deadline:
            assert len(rows) >= n, time.strftime("%H:%M:%S ") + f"{len(rows)} hook launch rows in {h.db}, expected {n}; learner log:\n" + \
                (h.root / "var/lib/warmstart/learner.log").read_text()[-2000:]
            return rows
        time.sleep(0.1)


def record_and_analyze(h, name):
    h.disk.drop_caches()
    h.ws("record", "--name", name, "--", *h.argv(name))
    return h.wsj("analyze", name)


def test_plain_launch_is_prefetched_like_warmstart_run(hookenv, capsys):
    h = hookenv
    name = "hk-mail"
    h.wsj("hook", "install")  # before analyze: analyze's completion must refresh the index itself
    r = record_and_analyze(h, name)
    assert r["hook"] and name in r["hook"]["apps"], f"analyze did not refresh the hook index: {r['hook']}"
    status = h.wsj("hook", "status")
    assert status["daemon"] and name in status["index"]["apps"]

    times = {"none": [], "run": [], "hook": []}
    prebuffer, phases, from_exec = [], [], []
    for rep in range(REPS):
        h.daemon(False)
        h.disk.drop_caches()
        r = h.wsj("run", "--name", name, "--mode", "segmented", "--", *h.argv(name))
        times["run"].append(r["launch_time_s"])
        prebuffer.append(r["prebuffer_s"])
        h.disk.drop_caches()
        times["none"].append(h.wsj("run", "--name", name, "--mode", "none", "--", *h.argv(name))["launch_time_s"])
        h.daemon(True)
        h.disk.drop_caches()
        t0 = time.monotonic()
        t, p = h.plain(name)
        assert p.returncode == 0, p.stderr
        times["hook"].append(t)
        ev = [e for e in h.events() if e.get("event") == "launch"][-1]
        # the daemon's clock is CLOCK_MONOTONIC too: fork -> exec event, hold, release -> exit
        phases.append("%.0f/%.0f/%.0f" % ((ev["t_exec"] - t0) * 1e3, ev["held_ms"], (t0 + t - ev["t"]) * 1e3))
        from_exec.append(t0 + t - ev["t_exec"])   # the stopwatch from the app's exec to our wait()
        wait_for_hook_rows(h, rep + 1)  # feedback reads the cache after the launch: before the next drop
    med = {k: statistics.median(v) for k, v in times.items()}
    with capsys.disabled():
        print(f"\nhook e2e {name} (medians of {REPS}, caches dropped before each, interleaved): "
              + ", ".join(f"{k} {med[k]:.3f} s {['%.3f' % x for x in v]}" for k, v in times.items()))
    hooked = [e for e in h.events() if e.get("event") == "launch"]
    with capsys.disabled():
        print("hooked launches (outcome, held ms):", [(e["outcome"], e.get("held_ms")) for e in hooked],
              "; run pre-buffer s:", ["%.3f" % x for x in prebuffer],
              "; hooked ms before the exec event/held/after release:", phases)
    assert len(hooked) >= REPS and all(e["outcome"] in ("ready", "deadline") for e in hooked), hooked
    assert sum(e["outcome"] == "ready" for e in hooked) >= REPS, hooked
    assert med["hook"] < med["none"], "the hooked launch was not faster than a cold one"
    # accuracy feedback: every hooked launch gets a launches row (mode "hook") from the learner
    rows = wait_for_hook_rows(h, REPS)[-REPS:]
    with capsys.disabled():
        print("feedback:", [(r["launch_time_s"], r["details"]["feedback"].get("hit_ratio"),
                             r["details"]["feedback"].get("missed_bytes"), r["prefetched_bytes"],
                             r["details"]["replay"].get("t_prebuffer_ns")) for r in rows])
    assert all(r["details"]["feedback"]["judged"] and r["details"]["feedback"]["hit_ratio"] is not None
               for r in rows), [r["details"]["feedback"] for r in rows]
    # the launch time (exec to exit) comes from the exit itself (the replayer's pidfd), not from
    # polling: it agrees within 10 ms with a stopwatch from the same exec (the daemon's event,
    # CLOCK_MONOTONIC) to the test's wait() for the plain launch. (The stopwatch from the fork
    # also counts the fork and the env and chroot execs before the app's exec: 7-11 ms on a busy
    # machine, which is not the launch time's error.)
    for r, t in zip(rows, times["hook"]):
        assert 0 < r["launch_time_s"] <= t, (r["launch_time_s"], t)
    diffs = [x - r["launch_time_s"] for r, x in zip(rows, from_exec)]
    with capsys.disabled():
        print("stopwatch from the exec - hooked launch time (ms):", ["%.1f" % (d * 1e3) for d in diffs])
    assert all(-0.010 <= d <= 0.010 for d in diffs), diffs
    # the launching user's own view (hook/users.py): root launched them, so users/0.jsonl
    view = [json.loads(x) for x in (h.root / "var/lib/warmstart/users/0.jsonl").read_text().splitlines()]
    assert len([v for v in view if v["app"] == name]) >= REPS and all(v["cold_s"] for v in view), view
    # and the report shows the app's hooked times and its gain (the recording is its cold launch)
    rep = next(a for a in h.wsj("report")["apps"] if a["app"] == name)
    assert rep["gain"] and rep["gain"] > 0 and rep["methods"]["hook"]["n"] >= REPS, rep
    # The 5 % target against `warmstart run` is a performance claim: `warmstart bench --modes
    # segmented,hook` measures it. Here that the hook delivers most of run's gain, with a margin a
    # noisy host cannot eat (measured 85-103 % of it; CI once saw hook/run swing to +15 %, which is
    # still ~90 % of the gain).
    gap = med["hook"] / med["run"] - 1
    share = (med["none"] - med["hook"]) / (med["none"] - med["run"])
    with capsys.disabled():
        print(f"hooked vs run: {gap:+.1%}, {share:.0%} of run's gain")
    assert share >= SHARE_OF_RUNS_GAIN, med


def test_learn_auto_prefetches_the_second_plain_launch(hookenv, capsys):
    h = hookenv
    etc = h.root / "etc"
    etc.mkdir(parents=True, exist_ok=True)
    (etc / "warmstart.toml").write_text(
        f'learn = "auto"\nlearn_paths = ["{h.disk.mountpoint}/usr/bin"]\n'
        "learn_idle_cpu = 1.0\nlearn_idle_io_kbps = 1000000\nlearn_idle_sample_s = 0.5\nlearn_idle_max_s = 5\n")
    os.chmod(etc / "warmstart.toml", 0o644)
    h.wsj("hook", "install")
    name = "hk-async"
    h.disk.drop_caches()
    t1, p = h.plain(name)  # never seen: recorded from its held exec
    assert p.returncode == 0, p.stderr
    log = h.root / "var/lib/warmstart/learner-events.jsonl"
    deadline = time.monotonic() + 120
    done = []
    while time.monotonic() < deadline:
        done = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
        if any(e["event"] == "analyzed" for e in done):
            break
        time.sleep(0.5)
    with capsys.disabled():
        print("\nlearner events:", done)
    assert any(e["event"] == "analyzed" and "schedule_id" in e for e in done), \
        (h.root / "var/lib/warmstart/learner.log").read_text()[-3000:]
    h.disk.drop_caches()
    t2, p = h.plain(name)
    assert p.returncode == 0, p.stderr
    hooked = [e for e in h.events() if e.get("event") == "launch"]
    with capsys.disabled():
        print(f"learn: first plain launch {t1:.3f} s (recorded), second {t2:.3f} s; hooked: {hooked}")
    assert hooked and hooked[-1]["outcome"] == "ready"
    # docs/hook.md: 1.733 s recorded, 0.501 s prefetched (0.29 x): the second launch at most half
    # the first, both from a dropped cache
    assert t2 <= LEARNED_OF_FIRST * t1, (t1, t2)
    # what the daemon and learner wrote names users' programs and files: root's only
    state = h.root / "var/lib/warmstart"
    private = [state / n for n in ("hook-events.jsonl", "learner-events.jsonl", "learner.log", "warmstartd.log")]
    private += [state / "launches", *(state / "launches").iterdir(), h.db]
    modes = {str(p.relative_to(h.root) if p.is_relative_to(h.root) else p): oct(stat.S_IMODE(p.stat().st_mode))
             for p in private if p.exists()}
    assert len(modes) >= 6 and all(int(m, 8) & 0o077 == 0 for m in modes.values()), modes


HIT_RATIO_20 = 0.85  # docs/hook.md: 0.90-1.0 each
JUDGED_OF_20 = 16    # docs/hook.md: 18-20 judged on this shared machine


def _wait_for_exit_measurement(launch, timeout=90):
    """Until the replayer's report of this launch holds its measurement at the exit (the report
    exists, empty, from the replayer's start), or the learner has consumed it already."""
    path = Path(launch["stats"])
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if "exit" in json.loads(path.read_text()):
                return
        except FileNotFoundError:
            return
        except ValueError:
            pass
        time.sleep(0.02)
    raise AssertionError(f"no measurement at the exit in {path} after {timeout} s")


def test_twenty_launches_with_cache_loss_all_prefetched(hookenv, capsys):
    """Everyday use: the page cache is dropped right after every hooked launch's exit (what a
    memory hog or a big copy does between two launches). The feedback must not take that for a
    bad schedule: all 20 launches are prefetched and the app never leaves the index.
    docs/hook.md ("Accuracy feedback", Measured): 20/20 `ready`, 20 judged, hit ratio 0.89 each."""
    h = hookenv
    name = "hk-async"
    record_and_analyze(h, name)
    h.wsj("hook", "install")
    outcomes = []
    for i in range(20):
        h.disk.drop_caches()
        t, p = h.plain(name)
        assert p.returncode == 0, p.stderr
        launch = [e for e in h.events() if e.get("event") == "launch"][-1]
        outcomes.append(launch["outcome"])
        # the cache is lost once the replayer has measured at the exit, before the learner reads
        # the report and judges (a drop in the moment between the exit and that measurement
        # makes the launch "not judged", never bad: that race is not what this test is about)
        _wait_for_exit_measurement(launch)
        h.disk.drop_caches()
        status = h.wsj("hook", "status")
        assert name in status["index"]["apps"], f"launch {i + 1}: {name} left the index: {status}"
    rows = wait_for_hook_rows(h, 20, timeout=120)
    verdicts = [r["details"]["feedback"] for r in rows]
    with capsys.disabled():
        print(f"\n20 hooked launches with cache loss: outcomes {outcomes}; judged "
              f"{sum(v['judged'] for v in verdicts)}, not judged: "
              f"{sorted({v['not_judged'] for v in verdicts if not v['judged']})}; hit ratios "
              f"{[round(v['hit_ratio'], 2) for v in verdicts if v.get('hit_ratio') is not None]}")
    # ready, or released at the hold's deadline with the replay going on (a loaded machine: the
    # replayer is slower than the hold): prefetched either way
    assert all(o in ("ready", "deadline") for o in outcomes), outcomes
    assert all((r["prefetched_bytes"] or 0) > 0 for r in rows), [r["prefetched_bytes"] for r in rows]
    # the cache lost after the exit does not stop a verdict: judged, at the documented ratio. Only
    # a cache lost during the launch itself leaves one not judged, and says so (0-2 of 20 in four
    # runs here; drop_caches is global on this shared machine)
    judged = [v for v in verdicts if v["judged"]]
    assert len(judged) >= JUDGED_OF_20, [v.get("not_judged") for v in verdicts]
    assert all(v["hit_ratio"] >= HIT_RATIO_20 for v in judged), [v["hit_ratio"] for v in judged]
    assert all("still cached at the exit" in v["not_judged"] or "evicted" in v["not_judged"]
               for v in verdicts if not v["judged"]), verdicts
    assert not any(v["action"] for v in verdicts), verdicts
    status = h.wsj("hook", "status")
    assert name in status["index"]["apps"] and not status["degraded"], status


CONCURRENT = {  # name -> (argv inside the image, check of a plain run's result)
    "hk-c-py": ["python3", "-c", "import json, decimal, sqlite3, argparse, tarfile, email.mime.multipart, "
                "http.client, xml.dom.minidom; print(json.dumps({'x': str(decimal.Decimal(1) / 7)}))"],
    "hk-c-node": ["node", "-e", "const os = require('os'), path = require('path'); "
                  "console.log(os.platform(), path.join('a', 'b'), [1, 2, 3].map(x => x * 2).join(','))"],
    "hk-c-gcc": ["gcc", "-O2", "-c", "/tmp/ws-hook-conc.c", "-o", "/tmp/ws-hook-conc.o"],
}
CONC_SOURCE = ("#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n"
               "int f(const char *s) { char b[64]; snprintf(b, sizeof b, \"%s!\", s); return (int)strlen(b); }\n"
               "int main(int c, char **v) { return f(c > 1 ? v[1] : \"x\") + atoi(\"0\"); }\n")


SEVERAL_AT_MOST = 0.60  # with the hook, the three at once take at most 60 % of the time without


def test_several_recorded_apps_launched_at_once(hookenv, capsys):
    """python3, node and gcc recorded and analyzed, then launched together (plain, caches dropped):
    each must give the same exit status and output as alone, with and without the hook; the
    total wall time of the three (first start -> last exit) is printed for both."""
    h = hookenv
    src = Path(h.disk.mountpoint) / "tmp/ws-hook-conc.c"
    src.write_text(CONC_SOURCE)
    obj = src.with_suffix(".o")

    def argv(name):
        return h.disk.chroot_argv(CONCURRENT[name])

    def result(p):
        out = p.stdout
        if "gcc" in " ".join(p.args):
            out = obj.read_bytes()[:4] if obj.exists() else b"no object"
        return p.returncode, out, p.stderr

    expected = {}
    for name in CONCURRENT:
        obj.unlink(missing_ok=True)
        expected[name] = result(subprocess.run(argv(name), capture_output=True, timeout=120))
        assert expected[name][0] == 0, (name, expected[name])
    assert expected["hk-c-gcc"][1] == b"\x7fELF"
    for name in CONCURRENT:
        h.disk.drop_caches()
        h.ws("record", "--name", name, "--", *argv(name))
        h.wsj("analyze", name)

    def together():
        obj.unlink(missing_ok=True)
        h.disk.drop_caches()
        t0 = time.monotonic()
        procs = {n: subprocess.Popen(argv(n), stdout=subprocess.PIPE, stderr=subprocess.PIPE) for n in CONCURRENT}
        each = {}

        def reap(n, p):
            out, err = p.communicate(timeout=300)
            each[n] = time.monotonic() - t0
            p.stdout, p.stderr = out, err
        threads = [threading.Thread(target=reap, args=item) for item in procs.items()]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        total = time.monotonic() - t0
        for n, p in procs.items():
            assert result(p) == expected[n], (n, result(p), expected[n])
        return total, each

    times = {"plain": [], "hook": []}
    outcomes = []
    for rep in range(REPS):
        h.daemon(False) if rep else None
        times["plain"].append(together())
        h.daemon(True)
        n_before = len(h.events())
        times["hook"].append(together())
        since = h.events()[n_before:]
        hooked = [e for e in since if e.get("event") == "launch"]
        # every event of the round in the message: a missing launch shows what the daemon did instead
        assert len(hooked) == 3 and all(e["outcome"] in ("ready", "deadline") for e in hooked), since
        outcomes.extend((e["outcome"], e["held_ms"]) for e in hooked)
        holds = {e["schedule_id"]: e["hold_ms"] for e in h.wsj("hook", "refresh")["entries"]}
        for e in hooked:  # released by the entry's own deadline (docs/hook.md, "Hold policy")
            assert e["held_ms"] <= hold_deadline_ms(e, holds[e["schedule_id"]]) + 60, (e, holds)
        wait_for_hook_rows(h, 3 * (rep + 1))
    med = {k: statistics.median(t for t, _ in v) for k, v in times.items()}
    with capsys.disabled():
        print(f"\nthree apps at once (python3, node, gcc; caches dropped; medians of {REPS}, interleaved): "
              f"total without hook {med['plain']:.3f} s {['%.3f' % t for t, _ in times['plain']]}, "
              f"with hook {med['hook']:.3f} s {['%.3f' % t for t, _ in times['hook']]} "
              f"({med['hook'] / med['plain'] - 1:+.1%})")
        for k, v in times.items():
            print(f"  {k} per app (s from the common start):",
                  {n: round(statistics.median(e[n] for _, e in v), 3) for n in CONCURRENT})
        print("  hooked (outcome, held ms):", outcomes)
    # docs/hook.md, "Several recorded apps launched at once": -55 % and -56 % measured
    assert med["hook"] <= med["plain"] * SEVERAL_AT_MOST, med
