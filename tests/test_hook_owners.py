"""A schedule learned from one user's launch is that user's (issue 23, items 2 and 3).

User A (nobody) launches a program that reads a file in A's 0700 home; the learner records that
launch (its real Recorder, the tracefs recorder following the process), analyzes it when idle and
refreshes the hook, as `learn = "auto"` does. Then:
- warmstartd, with the index the learner wrote, prefetches A's next launch, and neither root's
  nor user B's (daemon) launch of the same program: B and root do not get A's schedule;
- no file of the hook tree that B can read names the path in A's home (the public index and the
  exports hold only schedules any user may use).
"""

import os
import pwd
import shutil
import socket
import stat
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from conftest import have_tracefs, require
from test_hook_daemon import BUILD, Hook, have_fanotify_perm
from test_privilege import USER_PYTHON

A, B = "nobody", "daemon"
SECRET_NAME = b"private-notes-of-a"

WALK = """
import os, sys
hits, read = [], 0
for d, _dirs, files in os.walk(sys.argv[1]):
    for f in files:
        p = os.path.join(d, f)
        try:
            with open(p, 'rb') as fh:
                data = fh.read()
        except OSError:
            continue
        read += 1
        if sys.argv[2].encode() in data:
            hits.append(p)
print(read, *hits)
"""


def _ids(user):
    pw = pwd.getpwnam(user)
    return pw.pw_uid, pw.pw_gid


@pytest.fixture
def learned(emu_hdd):
    """The hook tree (WARMSTART_HOOK_ROOT-like) after the learner learned A's launch."""
    require(os.geteuid() == 0 and have_tracefs(), "needs root and tracefs")
    require(have_fanotify_perm(), "needs fanotify permission events")
    require((BUILD / "warmstartd").exists() and (BUILD / "warmstart-replay").exists(),
            "warmstartd / warmstart-replay not built: run `make binaries`")
    require(os.access(USER_PYTHON, os.X_OK), "needs a python3 in /usr/bin that other users can run")
    from warmstart.db import open_db
    from warmstart.hook.config import HookConfig
    from warmstart.hook.layout import HookPaths
    from warmstart.hook.learner import Idle, Learner
    top = Path(tempfile.mkdtemp(prefix="ws-own-", dir="/tmp"))
    os.chmod(top, 0o755)
    work = emu_hdd.mountpoint / top.name
    try:
        paths = HookPaths(top, top / "var/lib/warmstart", top / "run/warmstart", top / "etc")
        for d in (paths.state, paths.run, paths.etc):
            d.mkdir(parents=True, mode=0o755)
        for d in (top / "var", top / "var/lib", top / "run"):
            os.chmod(d, 0o755)
        work.mkdir(mode=0o755)
        os.chmod(work, 0o755)
        home = work / "home-a"
        home.mkdir(mode=0o700)
        uid_a, gid_a = _ids(A)
        os.chown(home, uid_a, gid_a)
        secret = home / (SECRET_NAME.decode() + ".txt")
        secret.write_bytes(os.urandom(512 * 1024))
        os.chown(secret, uid_a, gid_a)
        app = work / "catnotes"
        shutil.copy("/bin/cat", app)
        os.chmod(app, 0o755)
        db = paths.state / "warmstart.db"
        open_db(db).close()

        lr = Learner(str(db), paths, HookConfig(learn="auto", learn_idle_max_s=0.0, learn_record_timeout_s=60.0))
        emu_hdd.drop_caches()
        # A's launch, held before its exec as warmstartd holds it, until the learner traces it
        proc = subprocess.Popen(["/bin/sh", "-c", 'read go; exec "$0" "$1" >/dev/null', str(app), str(secret)],
                                stdin=subprocess.PIPE, user=uid_a, group=gid_a, extra_groups=[], cwd="/")
        st = app.stat()
        ours, theirs = socket.socketpair()
        theirs.sendall(b"LEARN %d %d %d %d %d 2\n" % (proc.pid, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
                       + os.fsencode(app) + b"\0" + os.fsencode(app) + b"\0" + os.fsencode(secret) + b"\0")
        lr.handle(ours)
        theirs.settimeout(30)
        assert theirs.recv(1) == b"r", "the learner declined A's launch"
        theirs.close()
        proc.stdin.write(b"go\n")
        proc.stdin.close()
        assert proc.wait(30) == 0
        lr.thread.join(90)
        assert lr.pending, (paths.learner_events.read_text() if paths.learner_events.exists() else "no events")
        lr.analyze_when_idle(Idle())
        yield paths, app, secret
    finally:
        shutil.rmtree(top, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)


def test_a_users_learned_schedule_serves_that_user_only_and_is_not_published(learned, tmp_path):
    from warmstart.hook.index import read_index
    paths, app, secret = learned
    uid_a, _ = _ids(A)
    uid_b, gid_b = _ids(B)
    [entry] = read_index(os.fsencode(paths.daemon_index)).entries
    assert entry.owner_uid == uid_a and entry.exe == os.fsencode(app)
    assert any(SECRET_NAME in f for f in entry.files), entry.files      # the schedule reads A's file

    # item 3: nothing B can read in the hook tree names A's private path
    r = subprocess.run([USER_PYTHON, "-S", "-c", WALK, str(paths.root), SECRET_NAME.decode()], capture_output=True,
                       text=True, cwd="/", user=uid_b, group=gid_b, extra_groups=[], env={"PATH": "/usr/bin:/bin"},
                       timeout=30)
    assert r.returncode == 0, r.stderr
    read, *hits = r.stdout.split()
    assert int(read) >= 1 and hits == [], f"user {B} reads A's private path in {hits}"
    assert stat.S_IMODE(paths.daemon_index.stat().st_mode) == 0o600
    assert read_index(os.fsencode(paths.index)).entries == []            # the public index: not A's
    assert stat.S_IMODE(Path(os.fsdecode(entry.schedule)).stat().st_mode) == 0o600

    # item 2: warmstartd uses A's schedule for A's launch only, never root's or B's
    h = Hook(tmp_path, app.parent)
    h.index, h.replayer = paths.daemon_index, BUILD / "warmstart-replay"
    h.start()
    try:
        for user in ("root", B, A):
            uid, gid = _ids(user)
            subprocess.run([str(app), str(secret)], capture_output=True, user=uid, group=gid, extra_groups=[],
                           cwd="/", timeout=30)
        time.sleep(0.3)
        launches = [(r["uid"], r["schedule_id"]) for r in h.records("launch")]
    finally:
        h.stop()
    assert launches == [(uid_a, entry.schedule_id)], (launches, h.log.read_text()[-2000:])


def test_the_launching_users_id_is_the_recordings_owner(tmp_path):
    """What the learner reads of a held launch (learner.launch_uid) is its real uid, the uid
    warmstartd's procinfo reads; a recording stores it, and one stored by root is root's."""
    require(os.geteuid() == 0, "needs root (to run a process as another user)")
    from warmstart.db import open_db
    from warmstart.db.recordings import insert_recording, recording_owners
    from warmstart.hook.entries import schedule_owner
    from warmstart.hook.learner import launch_uid
    from warmstart.model import Recording
    uid_a, gid_a = _ids(A)
    p = subprocess.Popen(["/bin/sleep", "5"], user=uid_a, group=gid_a, extra_groups=[], cwd="/")
    try:
        assert launch_uid(p.pid) == uid_a
    finally:
        p.kill()
        p.wait()
    assert launch_uid(p.pid) is None
    conn = open_db(tmp_path / "w.db")
    rec = Recording(started_at=1.0, launch_time_s=0.5, end_reason="exit", exit_status=0, backend="tracefs",
                    cold_method="none (learned from a real launch)")
    mine = insert_recording(conn, "x", b"/bin/x", ["x"], rec, owner_uid=uid_a)
    roots = insert_recording(conn, "y", b"/bin/y", ["y"], rec)
    assert recording_owners(conn, [mine]) == [uid_a] and recording_owners(conn, [roots]) == [0]
    assert schedule_owner([0, 0]) == 0 and schedule_owner([0, uid_a]) == uid_a
    assert schedule_owner([uid_a, 1]) is None and schedule_owner([None]) is None
