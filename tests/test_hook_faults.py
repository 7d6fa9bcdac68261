"""Fault tests of the launch hook on the emulated HDD, with a real recording, the real analyzer,
warmstartd and the real replayer: the database locked or corrupt, the schedule exports deleted,
the app upgraded between record and launch (its executable replaced, or one of its scheduled
files). In every case a plain launch must behave exactly like an unhooked one (exit status and
output), be held no longer than its entry's deadline, nothing may crash (daemon worker, learner),
and the daemon must keep serving later execs.

One app is recorded and analyzed once per module; each test gets a copy of that database and its
own hook tree (WARMSTART_HOOK_ROOT), installs the hook and uninstalls it on the way out. Files of
the shared system image that a test replaces are put back (same inode) afterwards.
"""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, require
from test_hook_daemon import have_fanotify_perm
from test_hook_e2e import BUILD, HookEnv

APP = "hk-fault"
CODE = ("import json, decimal, sqlite3, argparse, tarfile, email.mime.multipart; "
        "import sys; print(json.dumps({'x': str(decimal.Decimal(1) / 7), 'ok': True})); print('err', file=sys.stderr)")
SLACK_MS = 60  # poll wake-up and event-record latency on a loaded 2-core machine


class FaultEnv(HookEnv):
    def argv(self, name=APP):
        return self.disk.chroot_argv(["python3", "-c", CODE])

    def index(self):
        sys.path.insert(0, str(REPO))
        from warmstart.hook.index import read_index
        return read_index(os.fsencode(self.root / "var/lib/warmstart/hook.idx"))

    def worker_pid(self):
        from warmstart.hook import service
        from warmstart.hook.layout import HookPaths
        r = self.root
        st = service.read_stats(HookPaths(r, r / "var/lib/warmstart", r / "run/warmstart", r / "etc"))
        return st and st.get("worker_pid")

    def learner_pid(self):
        try:
            pid = int((self.root / "run/warmstart/learner.pid").read_text())
        except (OSError, ValueError):
            return None
        return pid if os.path.exists(f"/proc/{pid}") and b"learner" in Path(f"/proc/{pid}/cmdline").read_bytes() else None

    def launch_records(self):
        return [e for e in self.events() if e.get("event") == "launch"]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, emu_system):
    """A database with APP recorded and analyzed, and what a plain unhooked launch prints."""
    require(have_fanotify_perm(), "needs root and fanotify permission events")
    require((BUILD / "warmstartd").exists() and (BUILD / "warmstart-replay").exists(),
            "warmstartd / warmstart-replay not built: run `make binaries`")
    tmp = tmp_path_factory.mktemp("faults-template")
    h = FaultEnv(tmp, emu_system)
    p = subprocess.run(h.argv(), capture_output=True, timeout=120)
    assert p.returncode == 0 and p.stderr == b'err\n' and b'"ok": true' in p.stdout, p
    emu_system.drop_caches()
    h.ws("record", "--name", APP, "--", *h.argv())
    h.wsj("analyze", APP)
    return h.db, (p.returncode, p.stdout, p.stderr)


@pytest.fixture
def hook(tmp_path, recorded, emu_system):
    db, plain = recorded
    h = FaultEnv(tmp_path, emu_system)
    shutil.copy(db, h.db)
    h.plain_result = plain
    # feedback measures the cache after each launch; the next launch's drop_caches can come first
    # (a write waiting for the lock), which would judge the schedule inaccurate and unhook it
    etc = h.root / "etc"
    etc.mkdir(parents=True)
    (etc / "warmstart.toml").write_text("accuracy_threshold = 0.01\n")
    os.chmod(etc / "warmstart.toml", 0o644)
    r = h.wsj("hook", "install")
    assert [e["app"] for e in r["entries"]] == [APP], r
    h.hold_ms = r["entries"][0]["hold_ms"]
    h.worker0, h.learner0 = h.worker_pid(), h.learner_pid()
    assert h.worker0 and h.learner0
    try:
        yield h
    finally:
        h.ws("hook", "uninstall", check=False)
        assert not (h.root / "run/warmstart/warmstartd.pid").exists()
        assert h.learner_pid() is None


def launch_ok(h, cold=True):
    """A plain launch: same exit status and output as unhooked; returns its wall time."""
    if cold:
        h.disk.drop_caches()
    t, p = h.plain(APP)
    assert (p.returncode, p.stdout, p.stderr) == h.plain_result, p
    return t


def check_holds(h):
    """Every hooked launch was released by its deadline; returns the outcomes."""
    recs = h.launch_records()
    for r in recs:
        if "held_ms" in r:
            assert r["held_ms"] <= h.hold_ms + SLACK_MS, (r, h.hold_ms)
    return [r["outcome"] for r in recs]


def still_serving(h, expect_ready=True):
    """Nothing crashed: same worker, learner alive, and the next exec is served."""
    assert h.worker_pid() == h.worker0, "warmstartd's worker was restarted (crashed or hung)"
    assert h.learner_pid() == h.learner0, "the learner died: " + \
        (h.root / "var/lib/warmstart/learner.log").read_text()[-2000:]
    n = len(h.launch_records())
    launch_ok(h)
    if expect_ready:
        new = h.launch_records()[n:]
        assert [r["outcome"] for r in new] == ["ready"], new


class Locker:
    """Another process holding an exclusive write transaction on the database."""

    def __init__(self, db: Path):
        code = ("import sqlite3, sys\n"
                f"c = sqlite3.connect({str(db)!r}, isolation_level=None)\n"
                "c.execute('BEGIN EXCLUSIVE')\n"
                "c.execute('CREATE TABLE IF NOT EXISTS fault_lock_probe (x)')\n"
                "c.execute('INSERT INTO fault_lock_probe VALUES (1)')\n"
                "print('locked', flush=True)\n"
                "sys.stdin.read()\n"
                "c.execute('ROLLBACK')\n")
        self.p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True)
        assert self.p.stdout.readline().strip() == "locked"

    def release(self):
        if self.p.poll() is None:
            self.p.stdin.close()
            self.p.wait(10)


def test_db_locked(hook, capsys):
    """The daemon never opens the database. While another process holds an exclusive write
    transaction, a refresh still reads it (WAL) and the learner's feedback write waits for the
    lock (busy timeout) instead of failing or blocking a launch."""
    h = hook
    lock = Locker(h.db)
    try:
        t1 = launch_ok(h)  # a recorded app launches while the DB is locked
        time.sleep(1.5)  # the learner's feedback write for it is now waiting for the lock
        p = h.ws("hook", "refresh", "--json", check=False, timeout=120)
        assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
        assert [e["app"] for e in json.loads(p.stdout)["entries"]] == [APP]
        t2 = launch_ok(h)  # and again, the learner still waiting
        assert h.learner_pid() == h.learner0
    finally:
        lock.release()
    assert check_holds(h) == ["ready", "ready"]
    rows = _wait_feedback_rows(h, 2)
    with capsys.disabled():
        print(f"\nDB locked: launches {t1:.3f} s, {t2:.3f} s; feedback rows after unlock: {rows}")
    still_serving(h)


def _corrupt(db: Path):
    size = db.stat().st_size
    with open(db, "r+b") as f:
        for off in range(4096, size, 4096):
            f.seek(off)
            f.write(b"\xa5" * 512)
    for side in ("-wal", "-shm"):
        Path(str(db) + side).unlink(missing_ok=True)


def test_db_corrupt(hook):
    h = hook
    _corrupt(h.db)
    launch_ok(h)
    p = h.ws("hook", "refresh", check=False)
    assert p.returncode != 0 and "Traceback" not in p.stderr, p.stderr
    assert str(h.db) in p.stderr, p.stderr
    p = h.ws("hook", "status", check=False)
    assert "Traceback" not in p.stderr, p.stderr
    time.sleep(1.0)  # the learner's feedback for the first launch meets the corrupt DB
    assert check_holds(h) == ["ready"]
    still_serving(h)  # the index in use is kept
    assert "Traceback" not in (h.root / "var/lib/warmstart/learner.log").read_text()


def test_schedule_export_deleted(hook):
    h = hook
    exports = list((h.root / "var/lib/warmstart/schedules").glob("*.wsr"))
    assert exports
    for f in exports:
        f.unlink()
    launch_ok(h)
    assert check_holds(h) == ["replayer-exited"]
    h.wsj("hook", "refresh")  # rewrites the exports
    still_serving(h)


def _swap(path: Path, backup: Path, inplace: bool):
    """Replace `path` like an upgrade would (same content, new inode and mtime; or rewritten in
    place: same inode, new mtime); `backup` keeps the original inode for _restore."""
    if inplace:
        st = path.stat()
        shutil.copy2(path, backup)
        with open(path, "r+b") as f:
            data = f.read()
            f.seek(0)
            f.write(data)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
        return st
    os.link(path, backup)
    tmp = path.with_name(path.name + ".ws-upgrade")
    shutil.copy(path, tmp)
    os.rename(tmp, path)
    return None


def _restore(path: Path, backup: Path, st):
    if st is not None:  # in place: content is the same, put the mtime back
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        backup.unlink()
    else:
        os.rename(backup, path)


@pytest.mark.parametrize("inplace", [False, True], ids=["replaced", "rewritten-in-place"])
def test_app_executable_upgraded(hook, tmp_path, inplace):
    h = hook
    exe = Path(os.fsdecode(h.index().entries[0].exe))
    backup = exe.with_name(exe.name + ".ws-fault-orig")
    st = _swap(exe, backup, inplace)
    try:
        t = launch_ok(h)
        outcomes = check_holds(h)
        # replaced: the new inode has no mark, so no event at all; rewritten: identity mismatch
        # (or stale, the binary being a scheduled file too) - never a hold
        assert outcomes in ([], ["stale"]), outcomes
        if inplace:
            assert any(e.get("event") in ("identity-mismatch", "stale") for e in h.events()), h.events()
        assert t < 30
    finally:
        _restore(exe, backup, st)
    assert h.worker_pid() == h.worker0 and h.learner_pid() == h.learner0
    launch_ok(h)  # later execs still work


def test_scheduled_library_upgraded(hook):
    h = hook
    entry = h.index().entries[0]
    exe = entry.exe
    cands = [Path(os.fsdecode(f)) for f in entry.files
             if f != exe and (f.endswith(b".so") or b".so." in f or f.endswith(b".pyc")) and os.path.isfile(f)]
    assert cands, entry.files
    lib = max(cands, key=lambda p: p.stat().st_size)
    backup = lib.with_name(lib.name + ".ws-fault-orig")
    _swap(lib, backup, False)
    try:
        time.sleep(0.2)  # the worker reads its inotify events
        launch_ok(h)
        assert check_holds(h) == ["stale"], h.events()
        assert any(e.get("event") == "stale" for e in h.events())
    finally:
        _restore(lib, backup, None)
    still_serving(h, expect_ready=False)  # stale: allowed at once until re-recorded
    assert check_holds(h) == ["stale", "stale"]


def _wait_feedback_rows(h, n, timeout=60):
    from warmstart.db.connection import open_db
    deadline = time.monotonic() + timeout
    while True:
        conn = open_db(str(h.db))
        try:
            k = conn.execute("SELECT count(*) FROM launches WHERE mode = 'hook'").fetchone()[0]
        finally:
            conn.close()
        if k >= n or time.monotonic() > deadline:
            assert k >= n, (k, (h.root / "var/lib/warmstart/learner.log").read_text()[-2000:])
            return k
        time.sleep(0.5)
