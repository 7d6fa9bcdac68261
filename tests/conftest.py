"""Shared test policy: live-kernel tests skip with a reason elsewhere, but never under CI=true."""

import os
import shutil
import signal
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

IN_CI = os.environ.get("CI") == "true"

# Ctrl-C must reach the tests that send it (the recorder's, launching's), whoever started the
# suite: a job put in the background by a non-interactive shell (nohup, `cmd &` in a script)
# inherits SIGINT ignored, and then Python installs no KeyboardInterrupt handler, here or in the
# processes the tests start (an ignored signal stays ignored across exec; a handled one does not).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def require(condition: bool, reason: str) -> None:
    """Skip the calling test with `reason` unless `condition`; under CI=true, fail instead."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"required in CI but unavailable: {reason}")
    pytest.skip(reason)


def have_root() -> bool:
    return os.geteuid() == 0


def have_tracefs() -> bool:
    """Root and a tracefs the product can use: mounted by tracefs_root() if it is not yet."""
    from warmstart.errors import WarmstartError
    from warmstart.recorder.tracefs import tracefs_root
    if not have_root():
        return False
    try:
        return (tracefs_root() / "events").is_dir()
    except WarmstartError:
        return False


def have_fuse() -> bool:
    return have_root() and os.path.exists("/dev/fuse") and shutil.which("fusermount3") is not None


def have_loop() -> bool:
    return have_root() and os.path.exists("/dev/loop-control")


@pytest.fixture
def needs_root():
    require(have_root(), "needs root")


@pytest.fixture
def needs_tracefs():
    require(have_tracefs(), "needs root and tracefs (mount -t tracefs nodev /sys/kernel/tracing)")


@pytest.fixture
def needs_emulator():
    require(have_fuse() and have_loop(), "needs root, /dev/fuse, fusermount3 and loop devices")


@pytest.fixture
def db_path(tmp_path):
    """A fresh database file for one test."""
    return tmp_path / "warmstart.db"


# ---- emulated disks (warmstart/emudisk, docs/emulated-disk.md) ----------------------------------

def _emu_name(kind: str) -> str:
    """A disk name of this pytest process, so concurrent test runs do not tear down each other's
    disks; disks left by dead pytest processes are torn down first."""
    from warmstart.emudisk import EmuDisk, STATE_ROOT
    if STATE_ROOT.is_dir():
        for d in STATE_ROOT.iterdir():
            prefix, _, pid = d.name.rpartition("-")
            if prefix.startswith("pytest-") and pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
                EmuDisk.down_by_name(d.name)
    return f"pytest-{kind}-{os.getpid()}"


@pytest.fixture(scope="session")
def emu_hdd():
    """An empty ext4 (512 MiB) on the emulated 7200 rpm disk; tests may create files in it.

    Shared by the whole session: put your files in a directory of your own (tmp names).
    """
    require(have_fuse() and have_loop(), "needs root, /dev/fuse, fusermount3 and loop devices")
    from warmstart.emudisk import EmuDisk
    disk = EmuDisk.up(name=_emu_name("hdd"), profile="hdd7200", image="empty", size_mb=512, fresh=True)
    try:
        yield disk
    finally:
        disk.down()


def _emu_fs(fs: str):
    require(have_fuse() and have_loop(), "needs root, /dev/fuse, fusermount3 and loop devices")
    from warmstart.emudisk import EmuDisk
    disk = EmuDisk.up(name=_emu_name(fs), profile="hdd7200", image="empty", size_mb=512, fresh=True, fs=fs)
    try:
        yield disk
    finally:
        disk.down()


@pytest.fixture(scope="session")
def emu_xfs():
    """An empty XFS (512 MiB) on the emulated 7200 rpm disk, shared like emu_hdd."""
    yield from _emu_fs("xfs")


@pytest.fixture(scope="session")
def emu_btrfs():
    """An empty btrfs (512 MiB, mkfs.btrfs defaults) on the emulated
    7200 rpm disk, shared like emu_hdd. Its files report an anonymous st_dev (0:N), not the loop
    device's."""
    yield from _emu_fs("btrfs")


@pytest.fixture(scope="session")
def emu_system():
    """An aged system image (python3, gcc, node) on the emulated 7200 rpm disk; run programs in
    it with `disk.chroot_argv([...])`. Built once and cached in /var/cache/warmstart/images."""
    require(have_fuse() and have_loop(), "needs root, /dev/fuse, fusermount3 and loop devices")
    from warmstart.emudisk import EmuDisk
    disk = EmuDisk.up(name=_emu_name("system"), profile="hdd7200", image="system", fresh=True)
    try:
        yield disk
    finally:
        disk.down()
