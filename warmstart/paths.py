"""Where things live: the database, the built C helpers; how private state files are opened."""

import os
from typing import Optional
from pathlib import Path

from .errors import WarmstartError

REPO_ROOT = Path(__file__).resolve().parent.parent


def default_db_path() -> Path:
    """WARMSTART_DB, else /var/lib/warmstart as root, else $XDG_DATA_HOME/warmstart."""
    env = os.environ.get("WARMSTART_DB")
    if env:
        return Path(env)
    if os.geteuid() == 0:
        return Path("/var/lib/warmstart/warmstart.db")
    data_home = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(data_home) / "warmstart" / "warmstart.db"


def libexec_dir() -> Path:
    """The directory of the built C programs: WARMSTART_LIBEXEC, else the checkout's build/."""
    env = os.environ.get("WARMSTART_LIBEXEC")
    return Path(env) if env else REPO_ROOT / "build"


def helper_binary(name: str) -> Path:
    """Path of a built C helper (warmstart-replay, warmstart-probe, hddsim, ...)."""
    path = libexec_dir() / name
    if not os.access(path, os.X_OK):
        raise WarmstartError(f"{name} is not built ({path} missing): run `make build` in {REPO_ROOT}")
    return path


PRIVATE_MODE = 0o600   # the database, logs and event records name users' programs, files and command lines


def open_private_append(path, text: bool = False):
    """Open path for appending, creating it readable by its owner only; a file of ours that an
    older warmstart left readable by others is made private first."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, PRIVATE_MODE)
    try:
        st = os.fstat(fd)
        if st.st_uid == os.geteuid() and st.st_mode & 0o077:
            os.fchmod(fd, PRIVATE_MODE)
        return os.fdopen(fd, "a" if text else "ab")
    except BaseException:
        os.close(fd)
        raise


def replace_file(path, data: bytes, mode: int = PRIVATE_MODE, owner: Optional[int] = None) -> None:
    """Give path the content `data` at once: written to PATH.tmp.PID beside it, then renamed over
    it, so a reader, or the writer killed at any point, never sees it half-written (`hook
    refresh` removes the temp files of writers that died before their rename). With `owner`,
    the file is that uid's, with exactly `mode`."""
    path = os.fsencode(path)
    tmp = path + b".tmp.%d" % os.getpid()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
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
    """Create directory path (and its parents) readable by its owner only, or make it so."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    if path.stat().st_mode & 0o077:
        os.chmod(path, 0o700)
