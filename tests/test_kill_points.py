"""SIGKILL at many points of `analyze` (which also refreshes an installed hook's index and exports),
`record`, `import`, `hook refresh` on its own and the hook learner's feedback on real hooked
launches: nothing is lost. After every kill the database passes `PRAGMA integrity_check` and its
foreign key check, the app has exactly one active schedule, and that schedule is complete (the
previous one, or a finished new one: never half-written); the hook index decodes and every
schedule it names exists in the database and has its export on disk. The next run, not killed,
cleans up what the killed ones left behind; a restarted learner judges every launch once.
"""

import json
import os
import selectors
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from conftest import REPO, have_tracefs, require
from test_hook_daemon import have_fanotify_perm

KILL_POINTS = 20
IMPORTS = "import json, decimal, email.mime.text, xml.dom.minidom"   # the app every test records
BUILD = REPO / "build"


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
    for name in ("hook.daemon.idx", "hook.idx"):   # warmstartd's, and the public one the shim reads
        for e in read_index(os.fsencode(state / name), require_root=False).entries:
            assert e.schedule_id in known, f"{name} names schedule {e.schedule_id}, not in the database"
            assert os.path.getsize(e.schedule) > 64, e.schedule
    return sid


def _kill_at(env, db, args, span, points, after, start=0.0, before=None, moment=None):
    """Run `warmstart ARGS` `points` times, SIGKILLed at moments spread evenly over its span from
    `start` (a fraction: past the interpreter's start-up), calling after(exit code) once each has
    died (0: it finished first); the exit codes. before(k), if given, runs before the k-th start
    (a new round's set-up); moment(k, proc), if given, replaces the timed wait: it returns at the
    k-th kill point (proc's stdout is then a pipe, for a moment told by what it logs)."""
    codes = []
    for k in range(points):
        if before is not None:
            before(k)
        p = subprocess.Popen([sys.executable, "-m", "warmstart", "--db", str(db), *args],
                             stdout=subprocess.PIPE if moment else subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, cwd=REPO, env=env)
        if moment is not None:
            moment(k, p)
        else:
            time.sleep(span * (start + (1 - start) * (k + 0.5) / points))
        p.send_signal(signal.SIGKILL)
        codes.append(p.wait())
        if p.stdout is not None:
            p.stdout.close()
        after(codes[-1])
    return codes


def _hook_tree(tmp_path):
    """The test's database, its private hook tree, the tree's state directory, and the
    environment that points warmstart at them."""
    db, root = tmp_path / "w.db", tmp_path / "hookroot"
    env = dict(os.environ, WARMSTART_HOOK_ROOT=str(root), PYTHONPATH=str(REPO))
    return db, root, root / "var/lib/warmstart", env


def _recorded_and_hooked(env, db, app, argv):
    """app recorded and analyzed, with an installed hook (so every later analyze refreshes it)."""
    _ws(env, db, "record", "--name", app, "--", *argv)
    _ws(env, db, "analyze", app)
    _ws(env, db, "hook", "refresh")


def test_sigkill_at_twenty_points_of_analyze_and_index_refresh(tmp_path, capsys):
    require(have_tracefs(), "needs root and tracefs (to record the app once)")
    db, _, state, env = _hook_tree(tmp_path)
    app = "killme"
    _recorded_and_hooked(env, db, app, [sys.executable, "-c", IMPORTS])
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
        argv = [sys.executable, "-c", IMPORTS]
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
    db, _, state, env = _hook_tree(tmp_path)
    app = "killrec"
    argv = [sys.executable, "-c", IMPORTS]
    _recorded_and_hooked(env, db, app, argv)
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


# ---- the hook: `hook refresh` on its own, and the learner's feedback ---------------------------

def _require_hook():
    require(have_tracefs() and have_fanotify_perm(),
            "needs root, tracefs (to record the app) and fanotify permission events (warmstartd)")
    require((BUILD / "warmstartd").exists() and (BUILD / "warmstart-replay").exists(),
            "warmstartd / warmstart-replay not built: run `make binaries`")


def _hook_paths(root):
    from warmstart.hook.layout import HookPaths
    return HookPaths(root, root / "var/lib/warmstart", root / "run/warmstart", root / "etc")


def _python_copy(tmp_path):
    """The app's interpreter: a private copy of this one, so warmstartd's inode mark and its
    watches are on a file of this test alone (other engineers' python3 execs raise no event)."""
    py = tmp_path / "bin" / "python3"
    py.parent.mkdir()
    shutil.copy(os.path.realpath(sys.executable), py)
    return py


def _records(paths, since=0):
    """warmstartd's records from byte `since` of its log."""
    try:
        with open(paths.events, "rb") as f:
            f.seek(since)
            return [json.loads(line) for line in f.read().splitlines()]
    except FileNotFoundError:
        return []


def _indexed(state):
    """The schedules warmstartd's index names (what its stale records are about)."""
    from warmstart.hook.index import read_index
    return {e.schedule_id for e in read_index(os.fsencode(state / "hook.daemon.idx"), require_root=False).entries}


def _query(db, sql, *args):
    conn = sqlite3.connect(db)
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


def _has_open(proc, path, timeout=10.0):
    """Wait until proc has the file `path` open; the moment it was seen."""
    target, fds = os.path.realpath(path), f"/proc/{proc.pid}/fd"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            for fd in os.listdir(fds):
                try:
                    if os.readlink(f"{fds}/{fd}") == target:
                        return time.monotonic()
                except OSError:
                    pass
        except OSError:
            pass
        time.sleep(0.0005)
    return time.monotonic()


def _leftovers(state):
    """Temp files (NAME.tmp.PID) of writers that died before their rename."""
    return [str(p.relative_to(state)) for p in state.rglob("*.tmp.*")
            if not os.path.exists(f"/proc/{p.name.rpartition('.tmp.')[2]}")]


def test_sigkill_at_ten_points_of_hook_refresh(tmp_path, capsys):
    """`warmstart hook refresh` on its own, SIGKILLed at 10 points. Each round gives it work: a
    new analysis (made without refreshing this hook) and a stale record from warmstartd (the
    app's interpreter, a scheduled file, chmodded), so the refresh marks a schedule stale,
    exports the new one, rewrites the index and removes the old export. After every kill: the
    database intact, one complete active schedule, the index names the previous or the new
    schedule and every schedule it names is exported, the events offset is whole, and no record
    from before this install's generation (of another database, whose ids collide) is ever folded
    in. Then an uninterrupted refresh brings everything up to date and removes what the killed
    ones left."""
    from warmstart.hook import events, service
    _require_hook()
    db, root, state, env = _hook_tree(tmp_path)
    paths = _hook_paths(root)
    elsewhere = dict(env, WARMSTART_HOOK_ROOT=str(tmp_path / "no-hook"))  # analyze refreshes nothing there
    app = "killrefresh"
    py = _python_copy(tmp_path)
    argv = [str(py), "-c", IMPORTS]
    _ws(env, db, "record", "--name", app, "--", *argv)
    _ws(elsewhere, db, "analyze", app)
    # an earlier install, of another database, left records naming schedule ids that collide
    # with ours (the active one included), not yet folded into that database (its generation
    # and offset); they must never be folded into this one
    state.mkdir(parents=True)
    earlier = "".join(json.dumps({"t": 1.0, "event": "stale", "schedule_id": sid, "file_no": 0,
                                  "reason": "modified"}) + "\n" for sid in range(1, 41))
    fd = os.open(paths.events, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, earlier.encode())
    os.close(fd)
    paths.generation.write_text(json.dumps({"id": "earlier", "db": str(tmp_path / "other.db"),
                                            "events_offset": 0, "started_at": 1.0}))
    paths.events_offset.write_text("0")
    try:
        _ws(env, db, "hook", "install")
        service.stop_learner(paths)           # no feedback here: the refresh alone
        gen = events.generation(paths)["events_offset"]
        assert gen == len(earlier)
        indexed = _indexed(state)
        assert len(indexed) == 1 and not _query(db, "SELECT id FROM schedules WHERE stale = 1"), \
            "records of an earlier install were folded in by `hook install`"
        # most of a refresh is the interpreter's and the CLI's start-up, and the machine's load
        # makes that vary most: the kills are timed from the moment it has the database open
        # (its work begins), spread over that to the new index's rename and a quarter more
        works = []
        for _ in range(3):
            before = (state / "hook.idx").stat().st_ino
            p = subprocess.Popen([sys.executable, "-m", "warmstart", "--db", str(db), "hook", "refresh"],
                                 stdout=subprocess.DEVNULL, cwd=REPO, env=env)
            opened = _has_open(p, db)
            while (state / "hook.idx").stat().st_ino == before and p.poll() is None:
                time.sleep(0.0005)
            works.append(time.monotonic() - opened)
            assert p.wait(60) == 0
        work = 1.25 * sorted(works)[1]
        reported, rounds, outcomes = set(), [], []

        def new_round(k):
            _ws(elsewhere, db, "analyze", app)
            (old,) = _indexed(state)
            os.chmod(py, 0o755)               # warmstartd: a scheduled file changed -> stale record
            deadline = time.monotonic() + 10
            while old not in reported and time.monotonic() < deadline:
                reported.update(r["schedule_id"] for r in _records(paths, gen) if r.get("event") == "stale")
                time.sleep(0.02)
            assert old in reported, f"warmstartd wrote no stale record for schedule {old}"
            rounds.append((old, _check(db, state, app)))

        def after(rc):
            old, new = rounds[-1]
            assert _check(db, state, app) == new
            named = _indexed(state)
            assert named in ({old}, {new}), (named, old, new)
            offset = paths.events_offset.read_text()
            assert offset.isdigit() and int(offset) >= gen, f"events offset {offset!r}"
            stale = {r[0] for r in _query(db, "SELECT id FROM schedules WHERE stale = 1")}
            assert stale <= reported, f"schedules {stale - reported} marked stale by no record of this install"
            outcomes.append("finished" if rc == 0 else "new" if named == {new} else "kept")
        def moment(k, proc):
            _has_open(proc, db)
            time.sleep(work * (k + 0.5) / (KILL_POINTS // 2))
        _kill_at(env, db, ["hook", "refresh"], None, KILL_POINTS // 2, after, before=new_round, moment=moment)
        with capsys.disabled():
            print(f"\nhook refresh (its work, from the database's opening to the index's rename: "
                  f"{work / 1.25 * 1e3:.0f} ms) killed at {KILL_POINTS // 2} points: "
                  f"{dict(Counter(outcomes))} (kept: the index still named the previous schedule; new: "
                  f"killed after the new index was in place)")
        assert outcomes.count("kept") >= 2, outcomes
        _ws(env, db, "hook", "refresh")
        active = _check(db, state, app)
        assert _indexed(state) == {active}
        assert sorted(p.name for p in paths.schedules.iterdir()) == [f"{active}.wsr"]
        assert _leftovers(state) == [], f"killed refreshes left {_leftovers(state)}"
        assert int(paths.events_offset.read_text()) == paths.events.stat().st_size
        stale = {r[0] for r in _query(db, "SELECT id FROM schedules WHERE stale = 1")}
        assert stale == reported and active not in stale, (stale, reported)
        # an offset file emptied by a writer killed inside its write: the next refresh reads from
        # the generation's start, not from the first record of the log
        paths.events_offset.write_text("")
        _ws(env, db, "hook", "refresh")
        assert _indexed(state) == {active}
        assert {r[0] for r in _query(db, "SELECT id FROM schedules WHERE stale = 1")} == reported
    finally:
        _ws(env, db, "hook", "uninstall", check=False)


FEEDBACK_LAUNCHES = 16   # real hooked launches whose feedback the learner is killed in


class _Log:
    """A process's log lines as they come, each with the time it was read."""

    def __init__(self, proc):
        self.fd, self.buf, self.lines = proc.stdout.fileno(), b"", []
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.fd, selectors.EVENT_READ)

    def until(self, done, timeout=10.0):
        deadline = time.monotonic() + timeout
        while not done(self) and time.monotonic() < deadline:
            if not self.sel.select(timeout=deadline - time.monotonic()):
                continue
            data = os.read(self.fd, 65536)
            if not data:
                break
            self.buf += data
            *whole, self.buf = self.buf.split(b"\n")
            self.lines += [(time.monotonic(), line.decode(errors="replace")) for line in whole]
        self.sel.close()
        return self

    def listening(self):
        return [t for t, line in self.lines if "listening on" in line]

    def launches(self):
        return [t for t, line in self.lines if "hooked launch of schedule" in line]


def _learner(env, db, **kw):
    return subprocess.Popen([sys.executable, "-m", "warmstart", "--db", str(db), "hook", "learner"],
                            cwd=REPO, env=env, **kw)


def test_sigkill_at_twenty_points_of_the_learners_feedback(tmp_path, capsys):
    """The learner judging real hooked launches, SIGKILLed at 20 points and restarted. 16 plain
    launches of a recorded app through warmstartd (most evicted from the cache first, so most
    are judged; accuracy_threshold 1.0, so the judged ones are bad and, with learn = "auto",
    from the third on mark the schedule stale and refresh the index) are left for the learner,
    stopped meanwhile, with their replayers' reports. Ten rounds, each from that state: the
    learner is killed at a point spread over its processing, restarted and killed again at
    another point, then run undisturbed. After every kill: the database intact, one complete
    active schedule, the index consistent with the database, no launch judged twice (one
    launches row per launch record at most), a verdict that acts (relearn) has marked its
    schedule stale, the users' view and the learner's state file whole. After the undisturbed
    run: every launch of this install accounted for exactly once, with the same verdicts as an
    uninterrupted learner gave, in the users' view once each, no report left behind, the index
    refreshed, and no record of an earlier install judged."""
    from warmstart.hook import events, service
    from warmstart.recorder.coldcache import evict
    _require_hook()
    db, root, state, env = _hook_tree(tmp_path)
    paths = _hook_paths(root)
    app, n, rounds = "killfeedback", FEEDBACK_LAUNCHES, KILL_POINTS // 2
    py = _python_copy(tmp_path)
    argv = [str(py), "-c", IMPORTS + ", sqlite3, argparse, tarfile"]
    _ws(env, db, "record", "--name", app, "--", *argv)
    _ws(env, db, "analyze", app)
    paths.etc.mkdir(parents=True)
    paths.config.write_text('learn = "auto"\nlearn_paths = []\naccuracy_threshold = 1.0\n')
    os.chmod(paths.config, 0o644)
    files = [bytes(r[0]) for r in _query(db, "SELECT f.path FROM schedule_files f JOIN schedules s"
                                         " ON s.id = f.schedule_id WHERE s.active = 1")]

    def launch(count):
        """Plain launches, the learner stopped; waits for their replayers' reports."""
        service.stop_learner(paths)
        since = events.generation(paths)["events_offset"]
        for i in range(count):
            if i % 3 != 2:
                evict(files, [], lambda _msg: None)
            subprocess.run(argv, check=True, capture_output=True, timeout=60)
        deadline = time.monotonic() + 30
        while True:
            recs = [r for r in _records(paths, since) if r.get("event") == "launch"]
            try:
                if len(recs) == count and all(json.loads(Path(r["stats"]).read_text()) for r in recs):
                    return recs
            except (OSError, ValueError):
                pass
            assert time.monotonic() < deadline, f"{len(recs)} launch records of {count}: {recs}"
            time.sleep(0.05)
    try:
        _ws(env, db, "hook", "install")
        earlier = launch(2)                       # an earlier install's launches: never judged now
        _ws(env, db, "hook", "install")           # a new generation
        recs = launch(n)
    finally:
        service.stop(paths)                   # warmstartd: nothing more is written to its log
    assert all(r["outcome"] in ("ready", "deadline") and r["stats"] for r in recs), recs
    keys, old_keys = [r["stats"] for r in recs], {r["stats"] for r in earlier}
    log_size = paths.events.stat().st_size
    _query(db, "PRAGMA wal_checkpoint(TRUNCATE)")
    snap = tmp_path / "snapshot"
    snap.mkdir()
    shutil.copy2(db, snap / "w.db")
    shutil.copytree(state, snap / "state", symlinks=True)

    def restore():
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        shutil.copy2(snap / "w.db", db)
        shutil.rmtree(state)
        shutil.copytree(snap / "state", state, symlinks=True)

    def hook_rows():
        return [(r[0], json.loads(r[1])) for r in _query(
            db, "SELECT id, details_json FROM launches WHERE mode = 'hook' ORDER BY id")]

    def view():
        try:
            return [json.loads(line) for line in (paths.users / "0.jsonl").read_text().splitlines()]
        except FileNotFoundError:
            return []

    def feedback_state():
        raw = json.loads(paths.feedback_offset.read_text())      # never half-written
        return raw if isinstance(raw, dict) else {"offset": raw}

    def stale_indexed():
        stale = {r[0] for r in _query(db, "SELECT id FROM schedules WHERE stale = 1")}
        return _indexed(state) & stale

    def verdicts():
        return [(d["hook_event"]["stats"], *(d["feedback"].get(k) for k in
                 ("judged", "not_judged", "bad", "bad_streak", "action", "hit_ratio"))) for _, d in hook_rows()]

    def check():
        """The invariants after a kill; returns how many launches are stored."""
        _check(db, state, app)
        rows = hook_rows()
        seen = Counter(d["hook_event"]["stats"] for _, d in rows)
        assert max(seen.values(), default=0) <= 1, f"judged twice: {[k for k, c in seen.items() if c > 1]}"
        assert set(seen) <= set(keys), f"judged launches of an earlier install: {set(seen) - set(keys)}"
        stale = {r[0] for r in _query(db, "SELECT id FROM schedules WHERE stale = 1")}
        acted = {d["hook_event"]["schedule_id"] for _, d in rows if d["feedback"].get("action") == "relearn"}
        assert acted <= stale, f"a relearn verdict stored without its stale mark: {acted - stale}"
        assert len(view()) <= len(rows), (len(view()), len(rows))
        feedback_state()
        return len(rows)

    def accounted():
        rows = hook_rows()
        return (len(rows) == n and len(view()) == n and not list(paths.launches.iterdir())
                and not feedback_state().get("waiting") and not stale_indexed())

    def undisturbed(log):
        """Run the learner until every launch is accounted for; stop it (SIGTERM)."""
        started = Path(log).read_text().count("listening on") if Path(log).exists() else 0
        with open(log, "ab") as out:
            p = _learner(env, db, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 15
        try:
            # stopped only once it serves (its SIGTERM handler is set): with nothing left to do it
            # was otherwise terminated while Python was still starting, and died of the signal
            while ((not accounted() or Path(log).read_text().count("listening on") == started)
                   and time.monotonic() < deadline):
                time.sleep(0.05)
        finally:
            p.terminate()
            assert p.wait(15) == 0

    def check_final(log):
        check()
        rows = hook_rows()
        assert sorted(d["hook_event"]["stats"] for _, d in rows) == sorted(keys), \
            "launches not accounted for once each: " + Path(log).read_text()[-3000:]
        for _, d in rows:
            assert d["feedback"]["judged"] or d["feedback"]["not_judged"], d["feedback"]
        assert len(view()) == n, f"{len(view())} lines in the users' view for {n} launches"
        assert list(paths.launches.iterdir()) == [], "replayer reports left behind"
        fs = feedback_state()
        assert fs["offset"] == log_size and not fs.get("waiting"), fs
        assert paths.feedback_offset.stat().st_mode & 0o077 == 0, "the learner's state is readable by others"
        assert not stale_indexed(), "the index still names a schedule its verdicts marked stale"
        assert _leftovers(state) == [], _leftovers(state)

    # an uninterrupted learner: the verdicts every round must end with, and where in its run
    # the launches are judged
    restore()
    p = _learner(env, db, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    log = _Log(p).until(lambda lg: len(lg.launches()) >= n, 20)
    deadline = time.monotonic() + 15
    while not accounted() and time.monotonic() < deadline:
        time.sleep(0.05)
    p.terminate()
    p.wait(15)
    p.stdout.close()
    (tmp_path / "reference.log").write_text("\n".join(line for _, line in log.lines))
    assert len(log.launches()) == n and log.listening(), log.lines
    check_final(tmp_path / "reference.log")
    reference = verdicts()
    t0, first, last = log.listening()[0], log.launches()[0], log.launches()[-1]
    per_launch = max((last - first) / (n - 1), 0.001)
    lead = max(first - t0 - per_launch, 0.0)   # start-up to the first judgement
    stored, outcomes, logs = [], [], []

    def moment(k, proc):
        """Kill k: its place in the launches still to judge (the first kill of a round over all
        of them, the second over what the first left), plus one launch's time for the end."""
        r, todo = k // 2, n - (stored[-1] if k % 2 else 0)
        pos = ((r if k % 2 == 0 else rounds - 1 - r) + 0.5) / rounds * (todo + 1)
        j, frac = int(pos), pos - int(pos)
        lg = _Log(proc)
        logs.append(lg)
        if j == 0:
            lg.until(lambda x: x.listening())
            time.sleep(lead + frac * per_launch)
        else:
            lg.until(lambda x: len(x.launches()) >= j)
            time.sleep(frac * per_launch)

    def before(k):
        if k % 2 == 0:
            restore()

    def after(rc):
        stored.append(check())
        if len(stored) % 2 == 0:
            undisturbed(tmp_path / "learner.log")
            check_final(tmp_path / "learner.log")
            assert verdicts() == reference, "verdicts differ from the uninterrupted learner's"
            outcomes.append(stored[-2:])
    _kill_at(env, db, ["hook", "learner"], None, 2 * rounds, after, before=before, moment=moment)
    again = sum("(stored before a restart)" in line for lg in logs for _, line in lg.lines) + \
        (tmp_path / "learner.log").read_text().count("(stored before a restart)")
    with capsys.disabled():
        print(f"\nlearner feedback ({n} hooked launches: {sum(v[1] for v in reference)} judged, "
              f"{sum(bool(v[5]) for v in reference)} acting; {per_launch * 1e3:.1f} ms each) killed at "
              f"{2 * rounds} points, launches stored at each kill (first, second of a round): {outcomes}; "
              f"every round then accounted for all {n} once ({again} found stored after a kill by the "
              f"next learner, not judged again)")
    # a state file emptied by a writer killed inside its write: the learner starts again from
    # this install's generation, never from the log's first record
    restore()
    paths.feedback_offset.write_text("")
    undisturbed(tmp_path / "learner.log")
    check_final(tmp_path / "learner.log")
    assert not old_keys & {d["hook_event"]["stats"] for _, d in hook_rows()}
