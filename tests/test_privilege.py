"""The privilege boundary, tried as an unprivileged user (nobody): the system state root writes
cannot be read where it is private, and nothing of it can be written or replaced; and no schedule,
index or race between the analysis and the launch makes root read, or prefetch, a file the user
cannot read."""

import ctypes
import dataclasses
import errno
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import require
from replay_helpers import KIB, PAGE, REPLAY, _libc, build, cached_pages, evict, run_replayer
import test_hook_daemon
from test_hook_preload import SHIM, index_for
from warmstart.db import open_db

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

live = test_hook_daemon.live   # the fixture: warmstartd on the real kernel


def as_user(argv, user="nobody", env=(), **kw) -> subprocess.CompletedProcess:
    """Run argv as `user` (uid, gid, no supplementary groups), from /, with a minimal environment."""
    pw = pwd.getpwnam(user)
    return subprocess.run([str(a) for a in argv], capture_output=True, cwd="/", timeout=20, user=pw.pw_uid,
                          group=pw.pw_gid, extra_groups=[], env={"PATH": "/usr/bin:/bin", **dict(env)}, **kw)


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
    require(os.access(USER_PYTHON, os.X_OK), "needs a python3 in /usr/bin that nobody can run")
    results = {}
    for what, code, expect in ATTACKS:
        name = f"ws-priv-{os.getpid()}-{len(results)}"
        prog = (f"import errno, sys\nSTATE, ETC, NAME = {str(paths.state)!r}, {str(paths.etc)!r}, {name!r}\n"
                f"open('/tmp/' + NAME, 'wb').close()\n"
                f"try:\n    {code}\nexcept OSError as e:\n    print(e.errno)\nelse:\n    print(0)\n"
                f"finally:\n    __import__('os').unlink('/tmp/' + NAME)\n")
        r = as_user([USER_PYTHON, "-S", "-c", prog], text=True)
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


# ---- the replayer acts for the launching user (docs/security.md, "Who trusts what") ------------
#
# An unprivileged user tries to make root read, or prefetch into the page cache, a file only root
# may read: by a schedule naming it, by swapping a symlink or another file in for a scheduled file
# between the analysis and the launch, or by an index of their own. Files live on the root file
# system (ext4), in a directory under /tmp that nobody can reach (tmp_path is 0700).

SECRET_KIB = 256


class OpenWatch:
    """inotify IN_OPEN on one file: how many times it was opened (by anyone) since the watch began."""

    def __init__(self, path):
        self.fd = _libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0 or _libc.inotify_add_watch(self.fd, os.fsencode(path), 0x20) < 0:  # IN_OPEN
            raise OSError(ctypes.get_errno(), f"inotify on {path}")

    def opens(self) -> int:
        n = 0
        try:
            while True:
                n += len(os.read(self.fd, 4096)) // 16   # struct inotify_event, no name for the file itself
        except BlockingIOError:
            return n

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        os.close(self.fd)


@pytest.fixture
def user_tree():
    """top/ (root's, 0755) with secret.bin (root's, 0600) and home/ (nobody's), which holds
    lib.bin (nobody's, 0644): a file of the user's that a schedule names."""
    require(os.geteuid() == 0, "needs root (to own the secret and to become nobody)")
    require(REPLAY.exists(), "build/warmstart-replay missing: run `make binaries`")
    require(os.access(USER_PYTHON, os.X_OK), "needs a python3 in /usr/bin that nobody can run")
    nobody = pwd.getpwnam("nobody")
    top = Path(tempfile.mkdtemp(prefix="ws-race-", dir="/tmp"))
    try:
        os.chmod(top, 0o755)
        secret, home = top / "secret.bin", top / "home"
        secret.write_bytes(b"S" * (SECRET_KIB * KIB))
        os.chmod(secret, 0o600)
        home.mkdir(mode=0o755)
        own = home / "lib.bin"
        own.write_bytes(b"u" * (SECRET_KIB * KIB))
        for p in (home, own):
            os.chown(p, nobody.pw_uid, nobody.pw_gid)
        yield SimpleNamespace(top=top, secret=secret, home=home, own=own, uid=nobody.pw_uid, gid=nobody.pw_gid)
    finally:
        shutil.rmtree(top)


def as_nobody_python(code: str) -> None:
    """The user's move, made as the user: proves they have the rights the attack needs."""
    r = as_user([USER_PYTHON, "-S", "-c", code], text=True)
    assert r.returncode == 0, r.stderr


def pages(path, kib=SECRET_KIB) -> int:
    return cached_pages(path, 0, kib * KIB)


def replayers_gone(timeout=10.0) -> None:
    """Wait until no build/warmstart-replay runs (the shim double-forks it: not our child)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        running = False
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                running |= os.readlink(f"/proc/{pid}/exe") == str(REPLAY)
            except OSError:
                pass
        if not running:
            return
        time.sleep(0.02)
    pytest.fail("the replayer did not finish")


def test_warmstartd_replays_a_users_launch_with_the_users_rights(live, user_tree, tmp_path):
    """(a) A schedule naming a root-only file, and the user's launch of the app through the real
    daemon and replayer: the daemon starts the replayer with the launching user's ids, the
    replayer is denied the secret (counted) and prefetches the user's own file."""
    t = user_tree
    export = build(open_db(tmp_path / "db"), [t.own, t.secret], [[(0, 0, 64), (1, 0, 64)]], tmp_path)
    app = Path(shutil.copy("/bin/true", t.top / "app"))
    live.replayer = REPLAY
    live.write(dataclasses.replace(live.entry(app), schedule=os.fsencode(export), hold_ms=5000))
    launches = tmp_path / "launches"
    launches.mkdir(mode=0o700)
    live.start("--launch-dir", str(launches))
    for p in (t.own, t.secret):
        evict(p)
    assert as_user([app]).returncode == 0
    deadline = time.monotonic() + 10
    while not any(p.stat().st_size for p in launches.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.02)   # the replayer writes its report at its exit, after the app's
    [report] = launches.iterdir()
    st = json.loads(report.read_text())
    [launch] = live.records("launch")
    assert launch["uid"] == t.uid and launch["outcome"] == "ready", launch
    assert st["status"] == "ok" and st["files_denied"] == 1 and st["files_opened"] == 1, st
    assert st["ranges_skipped_file"] == 1 and st["bytes_fetched"] == 64 * KIB, st
    assert pages(t.secret) == 0
    assert pages(t.own, 64) == 64 * KIB // PAGE


@pytest.mark.parametrize("for_user", [False, True], ids=["root-replayer", "replayer-as-nobody"])
def test_a_symlink_swapped_in_for_a_scheduled_file_is_not_followed(user_tree, tmp_path, for_user):
    """(b) After the analysis the user replaces their scheduled file by a symlink to the secret.
    The replayer, as root or dropped to the user, does not even open the secret (O_NOFOLLOW: it
    is not opened then rejected by the identity check, it is never opened), counts the file as
    changed and brings none of the secret's pages in."""
    t = user_tree
    export = build(open_db(tmp_path / "db"), [t.own], [[(0, 0, 64)]], tmp_path)
    as_nobody_python(f"import os; os.unlink({str(t.own)!r}); os.symlink({str(t.secret)!r}, {str(t.own)!r})")
    evict(t.secret)
    drop = ["--uid", str(t.uid), "--gid", str(t.gid)] if for_user else []
    with OpenWatch(t.secret) as watch:
        rc, st, err = run_replayer(export, *drop)
        opens = watch.opens()
    assert rc == 0, err
    assert opens == 0, "the replayer opened the symlink's target"
    assert st["files_changed"] == 1 and st["files_denied"] == 0 and st["files_opened"] == 0, st
    assert st["ranges_skipped_file"] == 1 and st["bytes_fetched"] == 0, st
    assert pages(t.secret) == 0


@pytest.mark.parametrize("for_user", [False, True], ids=["root-replayer", "replayer-as-nobody"])
def test_a_symlink_swapped_in_for_a_scheduled_files_directory_is_not_followed(user_tree, tmp_path, for_user):
    """(b2) The scheduled file is home/sub/lib.bin; after the analysis the user swaps their
    directory sub for a symlink to a directory of root's holding a lib.bin of root's (root-only
    for the root replayer; readable by the user for the dropped one, so only the symlink rule
    can keep it closed). The replayer opens no directory through a symlink (openat2
    RESOLVE_NO_SYMLINKS, or the O_NOFOLLOW walk): the target is never opened, the file is
    counted as changed."""
    t = user_tree
    sub = t.home / "sub"
    sub.mkdir()
    own = sub / "lib.bin"
    shutil.move(t.own, own)
    os.chown(sub, t.uid, t.gid)
    target = t.top / "rootdir"
    target.mkdir(mode=0o755 if for_user else 0o700)
    victim = target / "lib.bin"
    victim.write_bytes(b"R" * (SECRET_KIB * KIB))
    os.chmod(victim, 0o644 if for_user else 0o600)
    export = build(open_db(tmp_path / "db"), [own], [[(0, 0, 64)]], tmp_path)
    as_nobody_python(f"import os; os.rename({str(sub)!r}, {str(sub)!r} + '.old'); "
                     f"os.symlink({str(target)!r}, {str(sub)!r})")
    evict(victim)
    drop = ["--uid", str(t.uid), "--gid", str(t.gid)] if for_user else []
    with OpenWatch(victim) as watch:
        rc, st, err = run_replayer(export, *drop)
        opens = watch.opens()
    assert rc == 0, err
    assert opens == 0, "the replayer opened a file through the symlinked directory"
    assert st["files_changed"] == 1 and st["files_denied"] == 0 and st["files_opened"] == 0, st
    assert st["ranges_skipped_file"] == 1 and st["bytes_fetched"] == 0, st
    assert pages(victim) == 0


@pytest.mark.parametrize("for_user", [False, True], ids=["root-replayer", "replayer-as-nobody"])
def test_a_file_renamed_over_a_scheduled_one_is_skipped_as_changed(user_tree, tmp_path, for_user):
    """(c) The user renames another file of theirs over the scheduled one, with the same size and
    the recorded mtime (theirs to set): only the inode differs. Skipped as changed, not read."""
    t = user_tree
    export = build(open_db(tmp_path / "db"), [t.own], [[(0, 0, 64)]], tmp_path)
    rec = os.stat(t.own)
    as_nobody_python(f"import os\nnew = {str(t.own)!r} + '.new'\n"
                     f"with open(new, 'wb') as f: f.write(b'x' * {rec.st_size})\n"
                     f"os.utime(new, ns=({rec.st_atime_ns}, {rec.st_mtime_ns}))\n"
                     f"os.rename(new, {str(t.own)!r})\n")
    now = os.stat(t.own)
    assert (now.st_size, now.st_mtime_ns) == (rec.st_size, rec.st_mtime_ns) and now.st_ino != rec.st_ino
    evict(t.own)
    drop = ["--uid", str(t.uid), "--gid", str(t.gid)] if for_user else []
    rc, st, err = run_replayer(export, *drop)
    assert rc == 0, err
    assert st["files_changed"] == 1 and st["files_opened"] == 0 and st["bytes_fetched"] == 0, st
    assert st["ranges_skipped_file"] == 1, st
    assert pages(t.own) == 0


@pytest.mark.parametrize("owner", ["nobody", "daemon"], ids=["own-index", "another-users-index"])
def test_through_the_shim_a_users_index_prefetches_only_that_users_files(user_tree, tmp_path, owner):
    """(d) nobody's own schedule names the secret and a file of theirs, and their own index
    (WARMSTART_INDEX) names their program; the shim starts the replayer in their process, so it
    has their rights: their file comes in, the secret does not. An index owned by another user
    (not root) is not used at all."""
    require(SHIM.exists(), "libwarmstart-preload.so not built: run `make binaries`")
    t = user_tree
    export = build(open_db(tmp_path / "db"), [t.own, t.secret], [[(0, 0, 64), (1, 0, 64)]], t.home)
    app = Path(shutil.copy("/bin/true", t.home / "app"))
    idx = index_for(t.home, [app], os.fsdecode(export))
    for p in (export, app):
        os.chown(p, t.uid, t.gid)
    pw = pwd.getpwnam(owner)
    os.chown(idx, pw.pw_uid, pw.pw_gid)
    for p in (t.own, t.secret):
        evict(p)
    r = as_user([app], env={"LD_PRELOAD": SHIM, "WARMSTART_INDEX": idx})
    assert r.returncode == 0 and r.stderr == b"", r.stderr
    replayers_gone()
    assert pages(t.secret) == 0
    assert pages(t.own, 64) == (64 * KIB // PAGE if owner == "nobody" else 0)


@pytest.mark.parametrize("owner", ["root", "nobody"])
def test_the_shim_in_a_root_process_runs_only_a_replayer_root_owns(user_tree, owner):
    """The user's environment can reach a root process (`su` without `-` keeps it, and the shim
    is in every process when it is in /etc/ld.so.preload). WARMSTART_REPLAYER then names the
    program the shim starts as root: one the user owns is not started; one root owns is."""
    require(SHIM.exists(), "libwarmstart-preload.so not built: run `make binaries`")
    t = user_tree
    marker = t.top / "replayer-ran"
    replayer = t.home / "replayer"
    replayer.write_text(f"#!/bin/sh\ntouch {marker}\necho ready >&3\n")
    replayer.chmod(0o755)
    pw = pwd.getpwnam(owner)
    os.chown(replayer, pw.pw_uid, pw.pw_gid)
    app = Path(shutil.copy("/bin/true", t.top / "app"))
    idx = index_for(t.top, [app], os.fsdecode(t.top / "none.wsr"))   # root's index
    r = subprocess.run([str(app)], env={"PATH": "/usr/bin:/bin", "LD_PRELOAD": str(SHIM),
                                        "WARMSTART_INDEX": str(idx), "WARMSTART_REPLAYER": str(replayer)},
                       capture_output=True, timeout=10)
    assert r.returncode == 0 and r.stderr == b"", r.stderr
    assert marker.exists() == (owner == "root")
