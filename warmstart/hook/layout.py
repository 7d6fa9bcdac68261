"""Where the hook keeps its files. WARMSTART_HOOK_ROOT prefixes every path (tests, staging);
as root the default is the real system, otherwise a per-user tree (preload-only install)."""

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class HookPaths:
    root: Path
    state: Path          # index, schedule exports, event log
    run: Path            # pidfile, stats
    etc: Path

    @property
    def index(self) -> Path:
        """The public index (0644): the shim reads it in every user's process. Entries usable by
        anyone only (owner 0), and as a user, that user's own."""
        return self.state / "hook.idx"

    @property
    def daemon_index(self) -> Path:
        """warmstartd's index (root's, 0600): every entry, those learned from a user's launch
        included (their paths are that user's: never published, docs/security.md)."""
        return self.state / "hook.daemon.idx"

    @property
    def schedules(self) -> Path:
        return self.state / "schedules"

    @property
    def events(self) -> Path:
        return self.state / "hook-events.jsonl"

    @property
    def events_offset(self) -> Path:
        return self.state / "hook-events.offset"

    @property
    def pidfile(self) -> Path:
        return self.run / "warmstartd.pid"

    @property
    def stats(self) -> Path:
        return self.run / "warmstartd.stats.json"

    @property
    def log(self) -> Path:
        return self.state / "warmstartd.log"

    @property
    def unit(self) -> Path:
        return self.etc / "systemd" / "system" / "warmstartd.service"

    @property
    def learner_unit(self) -> Path:
        return self.etc / "systemd" / "system" / "warmstart-learner.service"

    @property
    def ld_so_preload(self) -> Path:
        return self.etc / "ld.so.preload"

    @property
    def config(self) -> Path:
        """The system config (/etc/warmstart.toml under WARMSTART_HOOK_ROOT)."""
        return self.etc / "warmstart.toml"

    @property
    def launches(self) -> Path:
        """Per hooked launch: the replayer's stats JSON (consumed by the learner's feedback)."""
        return self.state / "launches"

    @property
    def learner_sock(self) -> Path:
        return self.run / "learner.sock"

    @property
    def learner_pidfile(self) -> Path:
        return self.run / "learner.pid"

    @property
    def learner_log(self) -> Path:
        return self.state / "learner.log"

    @property
    def learner_events(self) -> Path:
        return self.state / "learner-events.jsonl"

    @property
    def generation(self) -> Path:
        """Which install (and database) the events from an offset on belong to: events.py."""
        return self.state / "hook.generation"

    @property
    def feedback_offset(self) -> Path:
        """The learner's state: how far it read the events, and the launches not judged yet
        (learner.py; a plain offset when `hook install` starts a generation)."""
        return self.state / "hook-events.feedback-offset"

    @property
    def preload_env(self) -> Path:
        return self.state / "preload.env"

    @property
    def users(self) -> Path:
        """Per launching user: their hooked launches (users.py), readable by them alone."""
        return self.state / "users"


def system_paths() -> HookPaths:
    """The system hook's tree (warmstartd's), whoever asks."""
    root = Path(os.environ.get("WARMSTART_HOOK_ROOT", "/"))
    return HookPaths(root, root / "var/lib/warmstart", root / "run/warmstart", root / "etc")


def hook_paths() -> HookPaths:
    if os.geteuid() == 0 or "WARMSTART_HOOK_ROOT" in os.environ:
        return system_paths()
    root = Path("/")
    data = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local/share") / "warmstart"
    run = Path(os.environ.get("XDG_RUNTIME_DIR") or data) / "warmstart"
    return HookPaths(root, data, run, root / "etc")
