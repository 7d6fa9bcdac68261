"""Root never chmods, chowns or writes a file of another user's choosing through a symlink: every
file the CLI and the services (learner, hook refresh/install, warmstartd, the replayer) create or
tighten may sit in a directory a user writes (`--db` there, WARMSTART_HOOK_ROOT, -o), and a
symlink planted there by that user at the file's name, pointing to a root-owned file, must leave
that file's mode, owner and content as they were (issue 23, item 1)."""

import os
import pwd
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import REPO, require
from warmstart.errors import WarmstartError

BUILD = REPO / "build"
VICTIM_MODE = 0o4755   # a setuid program: a chmod to 0600 would take its bit away
VICTIM_DATA = b"#!/bin/sh\n# root's, not to be changed\n"


@pytest.fixture
def place():
    """userdir/ (nobody's, 0755: a directory a user writes) and, out of their reach, root's
    victim file (mode 04755) and victim directory (0755). plant(path) makes path, in userdir,
    a symlink of nobody's to the victim (or to `to`)."""
    require(os.geteuid() == 0, "needs root (the attacked process is root's)")
    nobody = pwd.getpwnam("nobody")
    top = Path(tempfile.mkdtemp(prefix="ws-secpaths-", dir="/tmp"))
    try:
        os.chmod(top, 0o755)
        user = top / "userdir"
        user.mkdir(mode=0o755)
        os.chown(user, nobody.pw_uid, nobody.pw_gid)
        root_only = top / "root"
        root_only.mkdir(mode=0o700)
        victim = root_only / "victim"
        victim.write_bytes(VICTIM_DATA)
        os.chmod(victim, VICTIM_MODE)
        vdir = root_only / "victim-dir"
        vdir.mkdir(mode=0o755)

        def plant(path: Path, to: Path = victim) -> Path:
            path.parent.mkdir(parents=True, exist_ok=True)
            for d in [path.parent, *path.parent.parents]:
                if d == top:
                    break
                os.chown(d, nobody.pw_uid, nobody.pw_gid)
            os.symlink(to, path)
            os.lchown(path, nobody.pw_uid, nobody.pw_gid)
            return path

        yield SimpleNamespace(top=top, user=user, victim=victim, vdir=vdir, plant=plant, uid=nobody.pw_uid)
    finally:
        shutil.rmtree(top)


def untouched(p) -> None:
    """The victims as they were: mode, owner, content."""
    st = os.lstat(p.victim)
    assert stat.S_IMODE(st.st_mode) == VICTIM_MODE, f"victim's mode is now {stat.S_IMODE(st.st_mode):o}"
    assert st.st_uid == 0 and p.victim.read_bytes() == VICTIM_DATA
    dst = os.lstat(p.vdir)
    assert stat.S_IMODE(dst.st_mode) == 0o755 and dst.st_uid == 0, f"victim dir is now {dst.st_mode:o}"
    assert os.listdir(p.vdir) == []


@pytest.mark.parametrize("suffix", ["-wal", "-shm", "-journal"])
@pytest.mark.parametrize("older", [False, True], ids=["new-database", "older-0644-database"])
def test_database_side_files_planted_as_symlinks_are_not_chmodded(place, suffix, older):
    """`--db` in a user's directory, new or left 0644 by an older warmstart: the user's symlink at
    its -wal, -shm or -journal name does not make root chmod the link's target (SQLite itself then
    refuses the link, or uses its own file)."""
    from warmstart.db import open_db
    db = place.user / "x.db"
    if older:
        open_db(db).close()
        os.chmod(db, 0o644)
    place.plant(Path(f"{db}{suffix}"))
    try:
        open_db(db).close()
    except WarmstartError:
        pass   # SQLite refuses the link itself; what matters is what root did to its target
    untouched(place)


def test_database_path_planted_as_a_symlink_is_not_chmodded(place):
    """The database's own name a symlink (to an empty root-owned file, which SQLite takes for an
    empty database): root does not chmod the target."""
    from warmstart.db import open_db
    empty = place.top / "root" / "empty"
    empty.write_bytes(b"")
    os.chmod(empty, 0o644)
    db = place.plant(place.user / "y.db", to=empty)
    try:
        open_db(db).close()
    except WarmstartError:
        pass
    assert stat.S_IMODE(os.stat(empty).st_mode) == 0o644
    untouched(place)


@pytest.fixture
def hook_root(place, monkeypatch):
    """The hook's whole tree (state, run, etc) under the user's directory."""
    monkeypatch.setenv("WARMSTART_HOOK_ROOT", str(place.user))
    from warmstart.hook.layout import system_paths
    return system_paths()


def _log_files(paths):
    return [paths.learner_log, paths.learner_events, paths.log]


def test_logs_planted_as_symlinks_are_refused(place, hook_root):
    """The learner's and the daemon's logs (paths.open_private_append): never opened through a
    link, so neither written nor chmodded."""
    from warmstart.paths import open_private_append
    for path in _log_files(hook_root):
        place.plant(path)
        with pytest.raises(OSError):
            open_private_append(path).close()
    untouched(place)


def test_private_dir_planted_as_a_symlink_is_refused(place, hook_root):
    """launches/ (paths.private_dir, 0700): a link to root's directory is refused, not chmodded."""
    from warmstart.paths import private_dir
    place.plant(hook_root.launches, to=place.vdir)
    with pytest.raises(WarmstartError, match="not a directory"):
        private_dir(hook_root.launches)
    untouched(place)


def test_replaced_files_planted_as_symlinks_are_replaced_not_written_through(place, hook_root):
    """Units, the preload files, the learner's pidfile and state, the export, a CLI export: each
    written as a new file renamed over the link (paths.replace_file), also when the user planted
    a link at the temp file's name."""
    from warmstart.hook import preload, service
    from warmstart.hook.events import write_offset
    from warmstart.paths import replace_file
    paths = hook_root
    targets = [paths.unit, paths.learner_unit, paths.ld_so_preload, paths.preload_env,
               paths.learner_pidfile, paths.events_offset, paths.schedules / "1.wsr", place.user / "out.wsched"]
    for t in targets:
        place.plant(t)
    place.plant(Path(f"{paths.unit}.tmp.{os.getpid()}"))   # a stale temp name is no way in either
    service.write_unit(paths)
    service.write_learner_unit(paths, str(place.user / "db"))
    preload.install(paths, system=True)
    preload.install(paths, system=False)
    replace_file(paths.learner_pidfile, b"1\n", 0o644)
    write_offset(paths.events_offset, 7)
    replace_file(paths.schedules / "1.wsr", b"x", 0o644)
    replace_file(place.user / "out.wsched", b"x", 0o644)
    for t in targets:
        st = os.lstat(t)
        assert stat.S_ISREG(st.st_mode) and st.st_uid == 0, t
        assert stat.S_IMODE(st.st_mode) in (0o600, 0o644), t
    untouched(place)


def _warmstartd(place, args, seconds=0.5):
    proc = subprocess.Popen([str(BUILD / "warmstartd"), "--no-watchdog", *args],
                            stderr=subprocess.PIPE)
    time.sleep(seconds)
    proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    return err.decode()


def test_warmstartd_and_the_replayer_write_no_file_through_a_link(place, tmp_path):
    """warmstartd's --events (appended, fchmodded 0600), --pidfile and --stats (SIGTERM writes
    it), and the replayer's --stats (opened as root, before its uid drop): a link of the user's
    at any of them leaves the target as it was."""
    require((BUILD / "warmstartd").exists() and (BUILD / "warmstart-replay").exists(),
            "warmstartd or warmstart-replay not built: run `make binaries`")
    from warmstart.hook.index import Index, write_index
    index = tmp_path / "hook.idx"
    write_index(os.fsencode(index), Index([]))
    u = place.user
    for name in ("events", "pid", "stats", "stats.tmp", "replay.json"):
        place.plant(u / name)
    common = ["--index", str(index), "--mark", str(tmp_path)]
    err = _warmstartd(place, [*common, "--events", str(u / "events"), "--stats", str(u / "stats")])
    untouched(place)
    assert "cannot append to" in err and "events" in err, err   # it said what it refused
    err = _warmstartd(place, [*common, "--pidfile", str(u / "pid")])
    untouched(place)
    assert "cannot write pidfile" in err, err
    r = subprocess.run([str(BUILD / "warmstart-replay"), "--stats", str(u / "replay.json"), "/nonexistent.wsr"],
                       capture_output=True, text=True, timeout=30)
    assert "cannot write stats" in r.stderr, r.stderr
    untouched(place)


@pytest.mark.parametrize("kind", ["fifo", "huge-sparse"])
def test_a_config_that_is_no_small_regular_file_is_refused_unread(place, kind):
    """The config root reads: a FIFO there does not hang the reader, a huge (sparse) file is not
    read into memory; both refused with what to do."""
    from warmstart.hook.config import load_config
    cfg = place.top / "root" / "warmstart.toml"
    if kind == "fifo":
        os.mkfifo(cfg, 0o644)
    else:
        with open(cfg, "wb") as f:
            f.truncate(300 << 20)
        os.chmod(cfg, 0o644)
    start = time.monotonic()
    with pytest.raises(WarmstartError, match="not a regular file of at most"):
        load_config(cfg, system=True)
    assert time.monotonic() - start < 5


def test_the_replayer_refuses_a_fifo_schedule_without_hanging(tmp_path):
    """The schedule's open does not wait for a writer (O_NONBLOCK): a FIFO is refused at once."""
    require((BUILD / "warmstart-replay").exists(), "warmstart-replay not built: run `make binaries`")
    fifo = tmp_path / "s.wsr"
    os.mkfifo(fifo)
    r = subprocess.run([str(BUILD / "warmstart-replay"), str(fifo)], capture_output=True, text=True, timeout=10)
    assert "not a regular file" in r.stderr, r.stderr
