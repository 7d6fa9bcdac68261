"""What warmstart keeps of a recorded command line: the launch's signature (argv[0] and the
arguments that name the program), never the other arguments, in new databases and in databases
written before the rule; `warmstart run` still finds the app by that signature."""

import json
import os
import sqlite3
import subprocess
import sys

from conftest import REPO, have_tracefs, require
from warmstart.db import open_db
from warmstart.db.connection import run_step
from warmstart.db.schema import APPLICATION_ID, MIGRATIONS
from warmstart.signature import signature_argv

SECRET = b"hunter2-do-not-keep"


def test_only_the_signature_of_a_command_line_is_kept():
    py = b"/usr/bin/python3.11"
    cases = [
        (py, [b"python3", b"app.py", b"--password", SECRET], [b"python3", b"app.py"]),
        (py, [b"python3", b"-X", b"dev", b"-c", b"import json", SECRET], [b"python3", b"-X", b"dev", b"-c", b"import json"]),
        (b"/usr/bin/gcc-12", [b"gcc", b"-O2", b"-c", b"/home/u/" + SECRET + b".c"], [b"gcc"]),
        (b"/usr/bin/env", [b"env", b"-i", b"PATH=/usr/bin", b"TOKEN=" + SECRET, b"chroot", b"/srv/root",
                           b"python3", b"-c", b"pass", SECRET],
         [b"env", b"-i", b"PATH=/usr/bin", b"chroot", b"/srv/root", b"python3", b"-c", b"pass"]),
        (b"/usr/bin/env", [b"env", b"--weird-option", b"TOKEN=" + SECRET, b"prog"], [b"env"]),
        (b"/usr/bin/gcc-12", [], []),
    ]
    for exe, argv, kept in cases:
        assert signature_argv(exe, argv) == kept, argv
        assert signature_argv(exe, kept) == kept, kept         # applying it again changes nothing


def _v5_database(path, argv):
    """A database as warmstart wrote it before command lines were redacted (schema version 5)."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    for number, (_, step) in enumerate(MIGRATIONS[:5], start=1):
        run_step(conn, step)
        conn.execute(f"PRAGMA user_version = {number}")
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute("INSERT INTO apps (name, executable, argv_json, created_at) VALUES ('mail', ?, ?, 0)",
                 (b"/usr/bin/python3.11", json.dumps([os.fsdecode(a) for a in argv])))
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def _on_disk(path) -> bytes:
    return b"".join(open(p, "rb").read() for p in (path, f"{path}-wal") if os.path.exists(p))


def test_upgrading_an_older_database_removes_the_arguments_from_the_file(tmp_path):
    path = tmp_path / "old.db"
    _v5_database(path, [b"python3", b"mail.py", b"--password=" + SECRET])
    assert SECRET in _on_disk(path)                              # the test would see it
    conn = open_db(path)
    row = conn.execute("SELECT argv_json FROM apps").fetchone()
    assert json.loads(row[0]) == ["python3", "mail.py"]
    conn.close()
    assert SECRET not in _on_disk(path)                          # not in freed pages nor the WAL


def test_record_keeps_no_argument_and_run_finds_the_app_by_its_signature(tmp_path):
    require(have_tracefs(), "needs root and tracefs to record")
    db = tmp_path / "w.db"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    code = "import json, sys; print(len(sys.argv))"

    def ws(*args):
        r = subprocess.run([sys.executable, "-m", "warmstart", "--db", str(db), *args], capture_output=True,
                           env=env, cwd=REPO, timeout=300)
        assert r.returncode == 0, r.stderr.decode()
        return r
    ws("record", "--name", "counter", "--", sys.executable, "-c", code, "--password", os.fsdecode(SECRET))
    ws("analyze", "counter")
    assert SECRET not in _on_disk(db)
    # other arguments, same signature: the same app, prefetched
    r = ws("run", "--json", "--", sys.executable, "-c", code, "another", "argument")
    out = json.loads(r.stdout)
    assert out["app_name"] == "counter" and out["prefetched"] and out["output"].strip() == "3"   # -c, another, argument
