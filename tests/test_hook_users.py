"""A user's own view of the system hook (hook/users.py): the learner writes it as root, the user
reads it as themselves, another user cannot."""

import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import REPO, require
from test_privilege import USER_PYTHON

NOW = 1_790_000_000.0

VIEW = """
import json, sys
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from warmstart.hook.layout import HookPaths
from warmstart.hook.users import render, view
r = Path(sys.argv[2])
v = view(HookPaths(r, r / "var/lib/warmstart", r / "run/warmstart", r / "etc"))
print(json.dumps({"view": v, "text": render(v)}))
"""


@pytest.fixture
def tree():
    require(os.geteuid() == 0, "needs root (to write as the learner and become other users)")
    top = Path(tempfile.mkdtemp(prefix="ws-users-", dir="/tmp"))
    os.chmod(top, 0o755)
    try:
        yield top
    finally:
        shutil.rmtree(top)


def _as(user, top):
    pw = pwd.getpwnam(user)
    r = subprocess.run([USER_PYTHON, "-S", "-c", VIEW, str(REPO), str(top)], capture_output=True, text=True,
                       cwd="/", user=pw.pw_uid, group=pw.pw_gid, extra_groups=[], env={"PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_a_user_sees_their_hooked_launches_and_gain_and_no_one_elses(tree):
    from warmstart.db import open_db
    from warmstart.db.launches import insert_launch
    from warmstart.hook.index import Index, IndexEntry, write_index
    from warmstart.hook.layout import HookPaths
    from warmstart.hook.users import record_launch
    require(os.access(USER_PYTHON, os.X_OK) and os.access(REPO / "warmstart", os.R_OK | os.X_OK),
            "needs a python3 and a checkout that nobody can read")
    paths = HookPaths(tree, tree / "var/lib/warmstart", tree / "run/warmstart", tree / "etc")
    paths.state.mkdir(parents=True, mode=0o755)
    for d in (tree / "var", tree / "var/lib"):
        os.chmod(d, 0o755)
    conn = open_db(paths.state / "warmstart.db")
    app = conn.execute("INSERT INTO apps(name, executable, argv_json, created_at) VALUES ('mail', CAST('/usr/bin/mail' AS BLOB),"
                       " '[\"mail\", \"--password=hunter2\"]', ?)", (NOW,)).lastrowid
    for t in (2.0, 2.4):   # the cold recordings: the reference of the gain
        conn.execute("INSERT INTO recordings(app_id, started_at, launch_time_s, end_reason, backend, cold_method,"
                     " status) VALUES (?, ?, ?, 'exit', 'tracefs', 'drop_caches', 'ok')", (app, NOW, t))
    write_index(os.fsencode(paths.index), Index([IndexEntry(
        dev=1, ino=2, size=3, mtime_ns=4, schedule_id=1, exe=b"/usr/bin/mail", schedule=b"/x.wsr", name="mail")]))
    nobody = pwd.getpwnam("nobody").pw_uid
    for t in (0.5, 0.6, 0.55):
        lid = insert_launch(conn, app_id=app, mode="hook", launch_time_s=t, started_at=NOW)
        record_launch(conn, paths, {"uid": nobody, "outcome": "ready", "held_ms": 40.0}, lid)
    mine = paths.users / f"{nobody}.jsonl"
    st = mine.stat()
    assert st.st_uid == nobody and stat.S_IMODE(st.st_mode) == 0o600
    assert paths.users.stat().st_uid == 0 and stat.S_IMODE(paths.users.stat().st_mode) == 0o755
    assert b"hunter2" not in mine.read_bytes()          # no command lines

    seen = _as("nobody", tree)
    assert seen["view"]["index"] == ["mail"]
    [a] = seen["view"]["apps"]
    assert a["app"] == "mail" and a["launches"] == 3 and a["median_s"] == 0.55 and a["cold_s"] == 2.2
    assert a["gain"] == pytest.approx(1 - 0.55 / 2.2) and "75%" in seen["text"]
    other = _as("daemon", tree)                          # another user: the public index, none of nobody's
    assert other["view"]["index"] == ["mail"] and other["view"]["apps"] == []
    r = subprocess.run([USER_PYTHON, "-S", "-c", f"open({str(mine)!r}).read()"], capture_output=True, text=True,
                       user="daemon", cwd="/")
    assert r.returncode != 0 and "PermissionError" in r.stderr, r.stderr


def test_a_full_view_is_trimmed_at_once_and_a_launch_is_added_once(tree):
    """The view keeps its newer lines (its last MAX_BYTES / 2) when it grows past MAX_BYTES: written beside it
    and renamed over it (a learner killed meanwhile leaves the old view whole, never a truncated
    one), still the user's, 0600. A launch the learner adds again after a restart (once=True) is
    not there twice."""
    from warmstart.db import open_db
    from warmstart.db.launches import insert_launch
    from warmstart.hook.layout import HookPaths
    from warmstart.hook.users import MAX_BYTES, MAX_LINES, record_launch
    paths = HookPaths(tree, tree / "var/lib/warmstart", tree / "run/warmstart", tree / "etc")
    paths.users.mkdir(parents=True, mode=0o755)
    conn = open_db(tree / "warmstart.db")
    app = conn.execute("INSERT INTO apps(name, executable, argv_json, created_at) VALUES ('mail', CAST('/usr/bin/mail' AS BLOB),"
                       " '[]', ?)", (NOW,)).lastrowid
    nobody = pwd.getpwnam("nobody").pw_uid
    mine = paths.users / f"{nobody}.jsonl"
    old = [json.dumps({"t": NOW, "app": "mail", "launch_s": 0.5, "n": i, "pad": "x" * 380}) + "\n"
           for i in range(MAX_LINES + 10)]
    mine.write_text("".join(old))
    os.chown(mine, nobody, -1)
    os.chmod(mine, 0o600)
    before = mine.stat().st_ino
    lid = insert_launch(conn, app_id=app, mode="hook", launch_time_s=0.4, started_at=NOW)
    event = {"uid": nobody, "outcome": "ready", "held_ms": 30.0}
    record_launch(conn, paths, event, lid)
    st = mine.stat()
    assert st.st_ino != before, "trimmed in place"
    assert st.st_uid == nobody and stat.S_IMODE(st.st_mode) == 0o600
    lines = mine.read_text().splitlines(keepends=True)
    kept = lines[:-1]   # the newest complete lines of its last MAX_BYTES / 2
    assert kept == old[len(old) - len(kept):] and json.loads(lines[-1])["launch_id"] == lid
    assert MAX_BYTES // 2 - 500 < len("".join(kept)) <= MAX_BYTES // 2
    record_launch(conn, paths, event, lid, once=True)
    assert mine.read_text().splitlines(keepends=True) == lines
    assert list(paths.users.iterdir()) == [mine]


LEARNER_STEP = """
import json, os, resource, sys
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from warmstart.db import open_db
from warmstart.hook.layout import HookPaths
from warmstart.hook.users import record_launch
r = Path(sys.argv[2])
paths = HookPaths(r, r / "var/lib/warmstart", r / "run/warmstart", r / "etc")
conn = open_db(r / "warmstart.db")
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
record_launch(conn, paths, {"uid": int(sys.argv[3]), "outcome": "ready", "held_ms": 30.0}, int(sys.argv[4]),
              once=sys.argv[5] == "once")
print(json.dumps({"before_kib": before, "after_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


@pytest.mark.parametrize("once, line_at_end", [(False, False), (True, True)],
                         ids=["append-to-a-hole", "once-after-a-hole-and-a-line"])
def test_a_huge_sparse_view_costs_the_learner_no_memory_and_no_disk(tree, once, line_at_end):
    """The view is the user's file: they can make it 300 MB sparse (4 KiB on disk). The learner
    (root) reads only its tail, keeps only complete lines of its own format (a hole's zeros are
    none) and replaces it with them: its memory stays flat and the file is not written out as
    300 MB of real blocks."""
    from warmstart.db import open_db
    from warmstart.db.launches import insert_launch
    from warmstart.hook.layout import HookPaths
    paths = HookPaths(tree, tree / "var/lib/warmstart", tree / "run/warmstart", tree / "etc")
    paths.users.mkdir(parents=True, mode=0o755)
    conn = open_db(tree / "warmstart.db")
    app = conn.execute("INSERT INTO apps(name, executable, argv_json, created_at) VALUES ('mail', CAST('/usr/bin/mail' AS BLOB),"
                       " '[]', ?)", (NOW,)).lastrowid
    lid = insert_launch(conn, app_id=app, mode="hook", launch_time_s=0.4, started_at=NOW)
    conn.close()
    nobody = pwd.getpwnam("nobody").pw_uid
    mine = paths.users / f"{nobody}.jsonl"
    last = json.dumps({"t": NOW, "app": "mail", "launch_s": 0.5, "launch_id": 999}).encode() + b"\n"
    planted = b"\n" + last if line_at_end else b"\0"   # a line of the view's at the very end, or none
    # the users dir is root's: root creates the file for the user, the user then writes it
    fd = os.open(mine, os.O_WRONLY | os.O_CREAT, 0o600)
    os.fchown(fd, nobody, -1)
    os.close(fd)
    r = subprocess.run([USER_PYTHON, "-S", "-c",
                        f"import os\nf = os.open({str(mine)!r}, os.O_WRONLY)\n"
                        f"os.ftruncate(f, 300 << 20)\nos.pwrite(f, {planted!r}, (300 << 20) - {len(planted)})\n"],
                       capture_output=True, text=True, cwd="/", user=nobody, group=pwd.getpwnam("nobody").pw_gid,
                       extra_groups=[])
    assert r.returncode == 0, r.stderr
    assert mine.stat().st_size == 300 << 20 and mine.stat().st_blocks * 512 <= 64 << 10
    out = subprocess.run([sys.executable, "-c", LEARNER_STEP, str(REPO), str(tree), str(nobody), str(lid),
                          "once" if once else "append"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    rss = json.loads(out.stdout)
    grew_mib = (rss["after_kib"] - rss["before_kib"]) / 1024
    assert grew_mib < 16, f"the learner grew by {grew_mib:.0f} MiB reading the user's file"
    st = mine.stat()
    assert st.st_blocks * 512 <= 64 << 10, f"{st.st_blocks * 512} bytes on disk: the hole was written out"
    assert st.st_size < 4096 and st.st_uid == nobody and stat.S_IMODE(st.st_mode) == 0o600
    lines = mine.read_bytes().splitlines(keepends=True)
    assert lines[:-1] == ([last] if line_at_end else []) and json.loads(lines[-1])["launch_id"] == lid


def test_launches_without_an_exact_time_are_shown_not_timed_and_never_enter_the_median(tree):
    """A hooked launch the replayer could not time (a long-running app) is stored with no time and
    the reason; the user's view counts it, says "not timed", and keeps it (and a -1 s placeholder
    an older learner wrote) out of the median and the gain."""
    from warmstart.db import open_db
    from warmstart.db.launches import insert_launch
    from warmstart.hook.layout import HookPaths
    from warmstart.hook.users import record_launch
    paths = HookPaths(tree, tree / "var/lib/warmstart", tree / "run/warmstart", tree / "etc")
    paths.users.mkdir(parents=True, mode=0o755)
    for d in (tree / "var", tree / "var/lib", paths.state):
        os.chmod(d, 0o755)
    conn = open_db(tree / "warmstart.db")
    app = conn.execute("INSERT INTO apps(name, executable, argv_json, created_at) VALUES ('mail', CAST('/usr/bin/mail' AS BLOB),"
                       " '[]', ?)", (NOW,)).lastrowid
    conn.execute("INSERT INTO recordings(app_id, started_at, launch_time_s, end_reason, backend, cold_method,"
                 " status) VALUES (?, ?, 2.0, 'exit', 'tracefs', 'drop_caches', 'ok')", (app, NOW))
    nobody = pwd.getpwnam("nobody").pw_uid
    mine = paths.users / f"{nobody}.jsonl"
    # a line an older learner wrote for a launch it could not time
    mine.write_text(json.dumps({"t": NOW, "app": "mail", "launch_s": -1.0, "outcome": "ready", "cold_s": 2.0}) + "\n")
    os.chown(mine, nobody, -1)
    os.chmod(mine, 0o600)
    why = "the app was still running when the replayer stopped waiting for its exit"
    for t in (0.5, None, 0.7):
        lid = insert_launch(conn, app_id=app, mode="hook", launch_time_s=t, started_at=NOW,
                            details={} if t else {"not_timed": why})
        record_launch(conn, paths, {"uid": nobody, "outcome": "ready", "held_ms": 40.0}, lid)
    seen = _as("nobody", tree)
    [a] = seen["view"]["apps"]
    assert a["launches"] == 4 and a["timed"] == 2 and a["not_timed"] == 2, a
    assert a["median_s"] == pytest.approx(0.6) and a["gain"] == pytest.approx(0.7), a
    assert "2 not timed" in seen["text"] and "-1" not in seen["text"], seen["text"]
    last = [json.loads(x) for x in mine.read_text().splitlines()][-2]
    assert last["launch_s"] is None and why in last["not_timed"]
