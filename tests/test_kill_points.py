"""SIGKILL at many points of `analyze` (which also refreshes an installed hook's index and exports):
nothing is lost. After every kill the database passes `PRAGMA integrity_check` and its foreign key
check, the app has exactly one active schedule, and that schedule is complete (the previous one, or
a finished new one: never half-written); the hook index decodes and every schedule it names exists
in the database and has its export on disk. The next analysis, not killed, cleans up what the
killed ones left behind.
"""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

from conftest import REPO, have_tracefs, require

KILL_POINTS = 20


def _ws(env, db, *args, check=True):
    p = subprocess.run([sys.executable, "-m", "warmstart", "--db", str(db), *args], capture_output=True,
                       text=True, cwd=REPO, env=env, timeout=600)
    assert not check or p.returncode == 0, p.stdout + p.stderr
    return p


def _check(db, state, app):
    """The invariants after a kill; returns the active schedule's id."""
    from warmstart.hook.index import read_index
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        active = conn.execute("SELECT s.id FROM schedules s JOIN apps a ON a.id = s.app_id "
                              "WHERE a.name = ? AND s.active = 1", (app,)).fetchall()
        assert len(active) == 1, f"{len(active)} active schedules"
        sid = active[0][0]
        segments = conn.execute("SELECT count(*) FROM segments WHERE schedule_id = ?", (sid,)).fetchone()[0]
        ranges = conn.execute("SELECT count(*) FROM schedule_ranges WHERE schedule_id = ?", (sid,)).fetchone()[0]
        files = conn.execute("SELECT count(*) FROM schedule_files WHERE schedule_id = ?", (sid,)).fetchone()[0]
        assert segments > 0 and ranges > 0 and files > 0, (sid, segments, ranges, files)
        known = {r[0] for r in conn.execute("SELECT id FROM schedules")}
    finally:
        conn.close()
    index = read_index(os.fsencode(state / "hook.idx"), require_root=False)
    for e in index.entries:
        assert e.schedule_id in known, f"the index names schedule {e.schedule_id}, not in the database"
        assert os.path.getsize(e.schedule) > 64, e.schedule
    return sid


def _kill_at(env, db, args, span, points, after, start=0.0):
    """Run `warmstart ARGS` `points` times, SIGKILLed at moments spread evenly over its span from
    `start` (a fraction: past the interpreter's start-up), calling after(exit code) once each has
    died (0: it finished first); the exit codes."""
    codes = []
    for k in range(points):
        p = subprocess.Popen([sys.executable, "-m", "warmstart", "--db", str(db), *args],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO, env=env)
        time.sleep(span * (start + (1 - start) * (k + 0.5) / points))
        p.send_signal(signal.SIGKILL)
        codes.append(p.wait())
        after(codes[-1])
    return codes


def test_sigkill_at_twenty_points_of_analyze_and_index_refresh(tmp_path, capsys):
    require(have_tracefs(), "needs root and tracefs (to record the app once)")
    db, root = tmp_path / "w.db", tmp_path / "hookroot"
    state = root / "var/lib/warmstart"
    env = dict(os.environ, WARMSTART_HOOK_ROOT=str(root), PYTHONPATH=str(REPO))
    app = "killme"
    argv = [sys.executable, "-c", "import json, decimal, email.mime.text, xml.dom.minidom"]
    _ws(env, db, "record", "--name", app, "--", *argv)
    _ws(env, db, "analyze", app)
    _ws(env, db, "hook", "refresh")                 # an installed hook: analyze refreshes it
    first = _check(db, state, app)
    t = time.monotonic()
    _ws(env, db, "analyze", app)                    # how long an uninterrupted one takes
    span = time.monotonic() - t
    active, outcomes = [_check(db, state, app)], []
    assert active[0] != first

    def classify(rc):
        now = _check(db, state, app)
        outcomes.append("finished" if rc == 0 else "kept" if now == active[-1] else "new")
        active.append(now)
    _kill_at(env, db, ["analyze", app], span, KILL_POINTS, classify)
    with capsys.disabled():
        print(f"\nanalyze+refresh ({span:.2f} s) killed at {KILL_POINTS} points: "
              f"{ {o: outcomes.count(o) for o in set(outcomes)} } (kept: the previous schedule stayed "
              f"active; new: killed after the new one was committed)")
    # a kill can land before, inside and after the transaction: at least two kinds seen
    assert outcomes.count("kept") >= 2, outcomes
    r = json.loads(_ws(env, db, "analyze", app, "--json").stdout)
    assert _check(db, state, app) == r["schedule_id"]
    leftovers = [p.name for p in state.rglob("*") if ".tmp" in p.name]
    assert leftovers == [], f"killed runs left {leftovers}"


def _fill(directory):
    """Fill the file system of directory; returns the filler file."""
    filler = directory / "filler"
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass
    return filler


def test_a_full_disk_during_record_and_analyze_gives_one_clear_error(tmp_path):
    """The database on a small file system: record and analyze meet a full disk. Each fails with
    one line that says so and what to do, nothing half-written stays, and once there is space
    again both work on the same database."""
    require(have_tracefs(), "needs root and tracefs (to record), and tmpfs mounts")
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m", "none", str(small)], check=True)
    try:
        db = small / "w.db"
        env = dict(os.environ, PYTHONPATH=str(REPO), WARMSTART_HOOK_ROOT=str(tmp_path / "hookroot"))
        argv = [sys.executable, "-c", "import json, decimal, email.mime.text, xml.dom.minidom"]
        _ws(env, db, "db-info")                                   # the database, empty
        filler = _fill(small)
        for args in (["record", "--name", "full", "--", *argv], ["analyze", "full"]):
            p = _ws(env, db, *args, check=False)
            assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
            last = p.stderr.strip().splitlines()[-1]
            assert last.startswith("warmstart: ") and "full" in last and "free space" in last, p.stderr
            if args[0] == "record":
                filler.unlink()                                   # space for the recording ...
                _ws(env, db, *args)
                filler = _fill(small)                             # ... then none for the analysis
        filler.unlink()                                           # (SQLite needs room even to read WAL)
        conn = sqlite3.connect(db)
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("SELECT count(*) FROM recordings").fetchone()[0] == 1
        assert conn.execute("SELECT count(*) FROM schedules").fetchone()[0] == 0   # nothing half-written
        conn.close()
        r = json.loads(_ws(env, db, "analyze", "full", "--json").stdout)
        assert r["schedule_id"]
    finally:
        subprocess.run(["umount", "-l", str(small)], check=False)


def test_sigkill_at_twenty_points_of_record_and_import(tmp_path, capsys):
    """record (tracing a launch) and import (a portable schedule) SIGKILLed at 10 points each: no
    recording without its requests, the database intact, one complete active schedule; the next
    record removes the tracefs instances the killed ones left."""
    from warmstart.recorder.tracefs import PREFIX, tracefs_root
    require(have_tracefs(), "needs root and tracefs")
    db, root = tmp_path / "w.db", tmp_path / "hookroot"
    state = root / "var/lib/warmstart"
    env = dict(os.environ, WARMSTART_HOOK_ROOT=str(root), PYTHONPATH=str(REPO))
    app = "killrec"
    argv = [sys.executable, "-c", "import json, decimal, email.mime.text, xml.dom.minidom"]
    _ws(env, db, "record", "--name", app, "--", *argv)
    _ws(env, db, "analyze", app)
    _ws(env, db, "hook", "refresh")
    wsched = tmp_path / "app.wsched"
    _ws(env, db, "export", app, "-o", str(wsched))
    spans = {}
    for what, args in (("record", ["record", "--name", app, "--", *argv]), ("import", ["import", str(wsched)])):
        t = time.monotonic()
        _ws(env, db, *args)
        spans[what] = time.monotonic() - t
    _check(db, state, app)
    codes = {}
    for what, args, start in (("record", ["record", "--name", app, "--", *argv], 0.0),
                              ("import", ["import", str(wsched)], 0.3)):   # much of import is start-up
        def consistent(rc, what=what):
            _check(db, state, app)
            conn = sqlite3.connect(db)
            empty = conn.execute("SELECT count(*) FROM recordings r WHERE NOT EXISTS"
                                 " (SELECT 1 FROM block_requests b WHERE b.recording_id = r.id)").fetchone()[0]
            conn.close()
            assert empty == 0, f"{empty} recordings without requests after a killed {what}"
        codes[what] = _kill_at(env, db, args, spans[what], KILL_POINTS // 2, consistent, start)
    with capsys.disabled():
        print(f"\nrecord ({spans['record']:.2f} s) and import ({spans['import']:.2f} s) killed at "
              f"{KILL_POINTS // 2} points each; finished before the kill: "
              f"{ {w: c.count(0) for w, c in codes.items()} }")
    _ws(env, db, "record", "--name", app, "--", *argv)
    inst = tracefs_root() / "instances"
    left = [n for n in os.listdir(inst) if n.startswith(PREFIX)
            and not os.path.exists(f"/proc/{n[len(PREFIX):].split('-', 1)[0]}")]
    assert left == [], f"tracefs instances of killed recorders still there: {left}"
