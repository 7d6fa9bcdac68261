"""The hook's config file: /etc/warmstart.toml (root-owned) or the user's own.

    learn = "off"                 # off | auto: record unknown apps on first launch
    learn_paths = ["/usr/bin", "/opt"]
    hold_factor = 3.0             # hold an exec for hold_factor x the pre-buffer's disk time,
    max_hold_fraction = 0.6       #   never more than this share of the recorded cold launch,
    min_hold_ms = 20              #   never less than this,
    max_hold_ms = 10000           #   never more than this (at most 60000; docs/hook.md "Hold policy")
    accuracy_threshold = 0.8      # a hooked launch whose hit ratio at its exit is below this is bad;
    stale_after_bad = 3           #   this many bad verdicts in a row: re-learn (auto) or degraded (off);
                                  #   as many launches not clearly faster than cold: off the index (both)
    try_whole = true              # a segmented schedule's launch is compared once with the same
                                  #   schedule fetched whole; the faster is kept (docs/hook.md)
    learn_idle_cpu = 0.5          # learned apps are analyzed when CPU busy < this and
    learn_idle_io_kbps = 2048     #   disk I/O < this, over learn_idle_sample_s (2.0),
    learn_idle_max_s = 600.0      #   or after this long anyway
    learn_record_timeout_s = 60.0

A system config not owned by root, or writable by others, is refused: it decides what a root
daemon reads on behalf of every user.
"""

import os
import stat
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional

from ..errors import WarmstartError
from .index import HOLD_CAP_MS

SYSTEM_CONFIG = Path("/etc/warmstart.toml")
MAX_CONFIG_BYTES = 64 << 10   # a config is a few lines: a bigger file, or one that is not a regular file, is refused unread


@dataclass
class HookConfig:
    learn: str = "off"
    learn_paths: List[str] = field(default_factory=lambda: ["/usr/bin", "/opt"])
    hold_factor: float = 3.0
    max_hold_fraction: float = 0.6    # of the recorded cold launch time
    min_hold_ms: int = 20
    max_hold_ms: int = 10000
    accuracy_threshold: float = 0.8
    stale_after_bad: int = 3          # consecutive bad verdicts before acting (docs/hook.md)
    try_whole: bool = True            # the segmented-or-whole trial (hook/trial.py)
    learn_idle_cpu: float = 0.5       # analyze learned apps when CPU busy is below this ...
    learn_idle_io_kbps: int = 2048    # ... and disk I/O below this (KiB/s, over learn_idle_sample_s)
    learn_idle_sample_s: float = 2.0
    learn_idle_max_s: float = 600.0   # analyze anyway after waiting this long
    learn_record_timeout_s: float = 60.0  # a learned launch is recorded for at most this long
    source: Optional[str] = None


def user_config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "warmstart" / "warmstart.toml"


def _check_owner(path: Path, st: os.stat_result, system: bool) -> None:
    owner_ok = st.st_uid == 0 if system else st.st_uid in (0, os.getuid())
    if not owner_ok or st.st_mode & 0o022:
        who = "root" if system else "root or you"
        raise WarmstartError(f"config {path} is not owned by {who} or is writable by group/others; "
                             f"refusing it: chown {'root' if system else os.getuid()} {path} && chmod 644 {path}")


def load_config(path: Optional[Path] = None, system: Optional[bool] = None) -> HookConfig:
    """The config at `path`, else the system one as root / the user's one otherwise, else defaults."""
    if system is None:
        system = os.geteuid() == 0
    if path is None:
        path = SYSTEM_CONFIG if system else user_config_path()
        if not path.exists():
            return HookConfig()
    try:   # NONBLOCK: a FIFO there must not hang the open
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise WarmstartError(f"cannot read config {path}: {e.strerror} (symlinks are refused); fix or remove it")
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_CONFIG_BYTES:
            raise WarmstartError(f"config {path} is not a regular file of at most {MAX_CONFIG_BYTES} bytes; "
                                 f"refusing it unread: fix or remove it")
        _check_owner(path, st, system)
        try:
            raw = tomllib.loads(f.read(MAX_CONFIG_BYTES + 1).decode())
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            raise WarmstartError(f"config {path}: {e}; fix the TOML syntax")
    cfg = HookConfig(source=str(path))
    known = set(cfg.__dataclass_fields__) - {"source"}
    unknown = set(raw) - known
    if unknown:
        raise WarmstartError(f"config {path}: unknown key(s) {', '.join(sorted(unknown))}; "
                             f"known: {', '.join(sorted(known))}")
    for key, value in raw.items():
        default = getattr(cfg, key)
        if isinstance(default, float) and isinstance(value, int):
            value = float(value)
        if type(value) is not type(default):
            raise WarmstartError(f"config {path}: {key} must be a {type(default).__name__}, got {value!r}")
        setattr(cfg, key, value)
    if cfg.learn not in ("off", "auto"):
        raise WarmstartError(f"config {path}: learn must be \"off\" or \"auto\", got {cfg.learn!r}")
    if not 1 <= cfg.max_hold_ms <= HOLD_CAP_MS or not 0 <= cfg.min_hold_ms <= cfg.max_hold_ms:
        raise WarmstartError(f"config {path}: need 0 <= min_hold_ms <= max_hold_ms <= {HOLD_CAP_MS}")
    if not 0.0 < cfg.accuracy_threshold <= 1.0 or cfg.hold_factor <= 0:
        raise WarmstartError(f"config {path}: accuracy_threshold must be in (0, 1] and hold_factor > 0")
    if cfg.stale_after_bad < 1:
        raise WarmstartError(f"config {path}: stale_after_bad must be at least 1")
    if not 0.0 < cfg.max_hold_fraction <= 1.0:
        raise WarmstartError(f"config {path}: max_hold_fraction must be in (0, 1]: a hold as long as "
                             f"the cold launch itself can only make the launch slower")
    return cfg
