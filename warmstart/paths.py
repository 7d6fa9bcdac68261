"""Where things live: the database, the built C helpers."""

import os
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
