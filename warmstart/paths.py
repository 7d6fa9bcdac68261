"""Where things live: the database, the built C helpers; how private state files are opened."""

import os
import stat
from typing import List, Optional
from pathlib import Path

from .errors import WarmstartError

PACKAGE_DIR = Path(__file__).resolve().parent
_PARENT = PACKAGE_DIR.parent
LIBEXEC_ENV = "WARMSTART_LIBEXEC"


def checkout_root() -> Optional[Path]:
    """The source checkout this package runs from (an editable install, PYTHONPATH), or None
    when it is installed (`pip install .`): then the C helpers and docs are package data."""
    if (_PARENT / "Makefile").is_file() and (_PARENT / "launchd-hook").is_dir():
        return _PARENT
    return None


def default_db_path() -> Path:
    """WARMSTART_DB, else /var/lib/warmstart as root, else $XDG_DATA_HOME/warmstart."""
    env = os.environ.get("WARMSTART_DB")
    if env:
        return Path(env)
    if os.geteuid() == 0:
        return Path("/var/lib/warmstart/warmstart.db")
    data_home = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(data_home) / "warmstart" / "warmstart.db"


def libexec_dirs() -> List[Path]:
    """Where the built C programs are looked for, in this order: $WARMSTART_LIBEXEC, the
    package's own libexec/ (what `pip install` built), the checkout's build/ (`make binaries`)."""
    dirs = [Path(os.environ[LIBEXEC_ENV])] if os.environ.get(LIBEXEC_ENV) else []
    dirs.append(PACKAGE_DIR / "libexec")
    root = checkout_root()
    if root is not None:
        dirs.append(root / "build")
    return dirs


def find_helper(name: str) -> Optional[Path]:
    """The first executable `name` in libexec_dirs(), or None."""
    for d in libexec_dirs():
        if os.access(d / name, os.X_OK):
            return d / name
    return None


def helper_binary(name: str) -> Path:
    """Path of a built C helper (warmstart-replay, warmstart-probe, hddsim, ...)."""
    path = find_helper(name)
    if path is not None:
        return path
    where = ", ".join(str(d) for d in libexec_dirs())
    root = checkout_root()
    if root is not None:
        fix = f"run `make binaries` in {root}"
    else:
        fix = ("reinstall warmstart (`pip install` builds the helpers of record, analyze, run, hook and "
               "speculate); the bench's emulated disk and test programs are built only in a source "
               "checkout (`make binaries`)")
    raise WarmstartError(f"{name} is not built (not in {where}): {fix}")


def doc_path(name: str) -> Optional[Path]:
    """A document of docs/ (hook.md, ...): the package's copy when installed, else the checkout's."""
    root = checkout_root()
    for d in (PACKAGE_DIR / "docs", root / "docs" if root is not None else None):
        if d is not None and (d / name).is_file():
            return d / name
    return None


PRIVATE_MODE = 0o600   # the database, logs and event records name users' programs, files and command lines


def _ours_to_tighten(st: os.stat_result) -> bool:
    """A regular file of this user's with one name, readable or writable by others."""
    return stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and st.st_uid == os.geteuid() and bool(st.st_mode & 0o077)


def tighten_private(path, mode: int = PRIVATE_MODE) -> None:
    """Give the file at path `mode` if it is a regular file of ours left readable by others; a
    symlink there is never followed (nor is a hard-linked file changed). Through an O_PATH fd:
    closing it drops none of this process's POSIX locks on the file (SQLite holds some), as
    closing a read fd would."""
    try:
        fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return   # absent
    try:
        if _ours_to_tighten(os.fstat(fd)):
            os.chmod(f"/proc/self/fd/{fd}", mode)   # the inode the fd holds: fchmod refuses O_PATH fds
    except OSError:
        pass     # not ours to change
    finally:
        os.close(fd)


def open_private_append(path, text: bool = False):
    """Open path for appending, creating it readable by its owner only; a file of ours that an
    older warmstart left readable by others is made private first. Never through a symlink
    (ELOOP), and only a regular file."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                 PRIVATE_MODE)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise WarmstartError(f"{os.fsdecode(path)} is not a regular file: remove it")
        os.set_blocking(fd, True)
        if _ours_to_tighten(st):
            os.fchmod(fd, PRIVATE_MODE)
        return os.fdopen(fd, "a" if text else "ab")
    except BaseException:
        os.close(fd)
        raise


def replace_file(path, data: bytes, mode: int = PRIVATE_MODE, owner: Optional[int] = None) -> None:
    """Give path the content `data` at once: written to PATH.tmp.PID beside it, then renamed over
    it, so a reader, or the writer killed at any point, never sees it half-written (`hook
    refresh` removes the temp files of writers that died before their rename). The file has
    exactly `mode` (whatever the umask) and, with `owner`, belongs to that uid. A symlink at
    PATH is replaced, never written through; the temp file is always a new one (O_EXCL)."""
    path = os.fsencode(path)
    tmp = path + b".tmp.%d" % os.getpid()
    try:
        os.unlink(tmp)   # a writer of this pid that died before its rename
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        if owner is not None:
            os.fchown(fd, owner, -1)
        os.fchmod(fd, mode)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)
    os.replace(tmp, path)


def private_dir(path: Path) -> None:
    """Create directory path (and its parents) readable by its owner only, or make it so; a
    symlink in its place is refused, not followed."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        raise WarmstartError(f"{path} is not a directory ({e.strerror}): remove it and retry")
    try:
        st = os.fstat(fd)
        if st.st_uid == os.geteuid() and st.st_mode & 0o077:
            os.fchmod(fd, 0o700)
    finally:
        os.close(fd)
