"""The privilege boundary, tried as an unprivileged user (nobody): the system state root writes
cannot be read where it is private, and nothing of it can be written or replaced."""

import errno
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import REPO, require

# the system's interpreter: the user cannot run root's (pyenv's under /root, say)
USER_PYTHON = shutil.which("python3", path="/usr/bin:/bin") or sys.executable

# Each case: (what, Python code run as the user, the errno it must fail with; None: must work).
ATTACKS = [
    ("read the database", "open(STATE + '/warmstart.db', 'rb').read(16)", errno.EACCES),
    ("read the database's WAL", "open(STATE + '/warmstart.db-wal', 'rb').read(16)", errno.EACCES),
    ("write the database", "open(STATE + '/warmstart.db', 'r+b')", errno.EACCES),
    ("read the learner's log", "open(STATE + '/learner.log', 'rb').read()", errno.EACCES),
    ("read the launch records", "open(STATE + '/hook-events.jsonl', 'rb').read()", errno.EACCES),
    ("list the replayer reports", "__import__('os').listdir(STATE + '/launches')", errno.EACCES),
    ("write the index", "open(STATE + '/hook.idx', 'r+b')", errno.EACCES),
    ("replace the index by rename", "__import__('os').rename('/tmp/' + NAME, STATE + '/hook.idx')", errno.EACCES),
    ("create a file in the state dir", "open(STATE + '/new', 'wb')", errno.EACCES),
    ("replace an export", "open(STATE + '/schedules/1.wsr', 'r+b')", errno.EACCES),
    ("add an export", "open(STATE + '/schedules/2.wsr', 'wb')", errno.EACCES),
    ("write the config", "open(ETC + '/warmstart.toml', 'r+b')", errno.EACCES),
    ("replace the config by rename", "__import__('os').rename('/tmp/' + NAME, ETC + '/warmstart.toml')", errno.EACCES),
    # public by design: the shim reads them in the user's own processes
    ("read the index", "open(STATE + '/hook.idx', 'rb').read()", None),
    ("read an export", "open(STATE + '/schedules/1.wsr', 'rb').read()", None),
]


@pytest.fixture
def system_state():
    """A hook tree laid out as root's install lays it out (modes from the code under test)."""
    require(os.geteuid() == 0, "needs root (to create the state and to become nobody)")
    from warmstart.db import open_db
    from warmstart.hook import service
    from warmstart.hook.index import Index, write_index
    from warmstart.hook.layout import HookPaths
    from warmstart.paths import open_private_append, private_dir
    top = Path(tempfile.mkdtemp(prefix="ws-priv-", dir="/tmp"))
    os.chmod(top, 0o755)
    paths = HookPaths(top, top / "var/lib/warmstart", top / "run/warmstart", top / "etc")
    try:
        for d in (paths.state, paths.run, paths.etc):
            d.mkdir(parents=True, mode=0o755)
        for d in (top / "var", top / "var/lib", top / "run"):
            os.chmod(d, 0o755)
        conn = open_db(paths.state / "warmstart.db")
        conn.execute("INSERT INTO apps(name, executable, argv_json, created_at) VALUES ('a', '/bin/a', '[\"secret\"]', 0)")
        write_index(os.fsencode(paths.index), Index([]))
        paths.schedules.mkdir(mode=0o755)
        (paths.schedules / "1.wsr").write_bytes(b"WSREPLAY" + bytes(56))
        os.chmod(paths.schedules / "1.wsr", 0o644)
        paths.config.write_text('learn = "off"\n')
        os.chmod(paths.config, 0o644)
        for log in (paths.learner_log, paths.events):
            with open_private_append(log) as f:
                f.write(b"a user's command line\n")
        private_dir(paths.launches)
        (paths.launches / "1-2-3.json").write_text("{}")
        assert service.running_pid(paths) is None
        yield paths, conn
        conn.close()
    finally:
        shutil.rmtree(top)


def test_unprivileged_user_cannot_read_private_state_or_replace_any(system_state, capsys):
    paths, conn = system_state
    nobody = pwd.getpwnam("nobody")
    require(os.access(USER_PYTHON, os.X_OK), "needs a python3 in /usr/bin that nobody can run")
    results = {}
    for what, code, expect in ATTACKS:
        name = f"ws-priv-{os.getpid()}-{len(results)}"
        prog = (f"import errno, sys\nSTATE, ETC, NAME = {str(paths.state)!r}, {str(paths.etc)!r}, {name!r}\n"
                f"open('/tmp/' + NAME, 'wb').close()\n"
                f"try:\n    {code}\nexcept OSError as e:\n    print(e.errno)\nelse:\n    print(0)\n"
                f"finally:\n    __import__('os').unlink('/tmp/' + NAME)\n")
        r = subprocess.run([USER_PYTHON, "-S", "-c", prog], capture_output=True, text=True, cwd="/",
                           user=nobody.pw_uid, group=nobody.pw_gid, extra_groups=[], env={"PATH": "/usr/bin:/bin"})
        assert r.returncode == 0, (what, r.stderr)
        results[what] = int(r.stdout.strip())
    with capsys.disabled():
        print(f"\n{len(ATTACKS)} attack cases as nobody:",
              ", ".join(f"{w}: {errno.errorcode.get(e, 'ok') if e else 'ok'}" for w, e in results.items()))
    wrong = {w: results[w] for w, _, expect in ATTACKS if results[w] != (expect or 0)}
    assert not wrong, wrong
    # and nothing changed
    assert conn.execute("SELECT argv_json FROM apps").fetchone()[0] == '["secret"]'
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
