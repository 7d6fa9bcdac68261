"""Start, stop and inspect warmstartd: through systemd when it is PID 1, directly otherwise."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

from ..errors import WarmstartError
from ..procs import running
from ..paths import checkout_root, doc_path, helper_binary, open_private_append, private_dir, replace_file
from .config import HookConfig
from .layout import HookPaths

UNITS = Path(__file__).resolve().parent / "units"   # package data: the same in a checkout and an install
UNIT_TEMPLATE = UNITS / "warmstartd.service"
LEARNER_UNIT_TEMPLATE = UNITS / "warmstart-learner.service"


def systemd_running() -> bool:
    """sd_booted(3): systemd is the init system iff /run/systemd/system exists."""
    return os.path.isdir("/run/systemd/system")


def daemon_args(paths: HookPaths, cfg: Optional[HookConfig] = None):
    args = [str(helper_binary("warmstartd")), "--index", str(paths.daemon_index), "--events", str(paths.events),
            "--stats", str(paths.stats), "--pidfile", str(paths.pidfile),
            "--replayer", str(helper_binary("warmstart-replay")), "--launch-dir", str(paths.launches)]
    if cfg is not None and cfg.learn == "auto":
        # learning sees every exec on the mounts of the learn paths (mount marks), and asks the
        # learner about the unknown ones under these paths
        args += ["--learner", str(paths.learner_sock)]
        for p in cfg.learn_paths:
            if os.path.isdir(p):
                args += ["--mark", os.path.realpath(p), "--learn-prefix", os.path.realpath(p)]
    return args


def learner_running(paths: HookPaths) -> Optional[int]:
    try:
        pid = int(paths.learner_pidfile.read_text().split()[0])
        return pid if running(pid, "learner") else None
    except (OSError, ValueError, IndexError):
        return None


def learner_args(db_path: str):
    return [sys.executable, "-m", "warmstart", "--db", db_path, "hook", "learner"]


def learner_env() -> dict:
    """What the learner needs beyond sys.executable to import this warmstart: the checkout on
    PYTHONPATH when it runs from one; nothing when installed."""
    root = checkout_root()
    return {"PYTHONPATH": str(root)} if root is not None else {}


def _fill(template: Path, **values: str) -> str:
    """A unit template with its @NAME@ fields filled in; the Documentation= and Environment=
    lines are dropped when there is nothing to put there."""
    docs = doc_path("hook.md")
    values = dict(values, DOCS=docs.as_uri() if docs else "", ENVIRONMENT=values.get("ENVIRONMENT", ""))
    lines = []
    for line in template.read_text().splitlines(keepends=True):
        for key, value in values.items():
            if f"@{key}@" in line:
                if not value:
                    line = ""
                    break
                line = line.replace(f"@{key}@", value)
        lines.append(line)
    return "".join(lines)


def write_learner_unit(paths: HookPaths, db_path: str) -> Path:
    """The learner's unit, part of warmstartd.service: after a reboot it runs again too."""
    env = " ".join(f"{k}={v}" for k, v in learner_env().items())
    text = _fill(LEARNER_UNIT_TEMPLATE, EXECSTART=" ".join(learner_args(db_path)), ENVIRONMENT=env)
    paths.learner_unit.parent.mkdir(parents=True, exist_ok=True)
    replace_file(paths.learner_unit, text.encode(), 0o644)   # never written through a link there
    return paths.learner_unit


def start_learner(paths: HookPaths, db_path: str, use_systemd: Optional[bool] = None) -> int:
    """`warmstart hook learner` (learning and accuracy feedback), restarted if it runs: the
    config or the database may have changed. Under systemd as warmstart-learner.service."""
    if use_systemd is None:
        use_systemd = systemd_running()
    if use_systemd:
        write_learner_unit(paths, db_path)
        systemctl("daemon-reload")
        systemctl("enable", "warmstart-learner.service")
        systemctl("restart", "warmstart-learner.service")
    else:
        pid = learner_running(paths)
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
            _wait_gone(pid)
        # a killed learner leaves its socket behind: the wait below must see the new one
        paths.learner_sock.unlink(missing_ok=True)
        log = open_private_append(paths.learner_log)
        try:
            env = dict(os.environ, **learner_env())
            p = subprocess.Popen(learner_args(db_path), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                 start_new_session=True, close_fds=True, env=env)
        finally:
            log.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        pid = learner_running(paths)
        if pid is not None and paths.learner_sock.exists():
            return pid
        if not use_systemd and p.poll() is not None:
            break
        time.sleep(0.05)
    raise WarmstartError(f"warmstart hook learner did not come up within 10 s; see {paths.learner_log}")


def _wait_gone(pid: int, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and running(pid, reap=True):   # ours if we started it
        time.sleep(0.02)
    if running(pid, reap=True):
        os.kill(pid, signal.SIGKILL)


def stop_learner(paths: HookPaths) -> bool:
    if systemd_running() and paths.learner_unit.exists():
        subprocess.run(["systemctl", "stop", "warmstart-learner.service"], capture_output=True)
    pid = learner_running(paths)
    if pid is not None:
        os.kill(pid, signal.SIGTERM)
        _wait_gone(pid, 15.0)  # a recording in progress is stopped and its tracefs instances removed
    paths.learner_pidfile.unlink(missing_ok=True)
    return pid is not None


def running_pid(paths: HookPaths) -> Optional[int]:
    """The watchdog's pid if the pidfile names a live warmstartd (not a recycled pid)."""
    try:
        pid = int(paths.pidfile.read_text().split()[0])
        return pid if running(pid, comm_prefix="warmstartd") else None
    except (OSError, ValueError, IndexError):
        return None


def write_unit(paths: HookPaths, cfg: Optional[HookConfig] = None) -> Path:
    text = _fill(UNIT_TEMPLATE, EXECSTART=" ".join(daemon_args(paths, cfg)))
    paths.unit.parent.mkdir(parents=True, exist_ok=True)
    replace_file(paths.unit, text.encode(), 0o644)
    return paths.unit


def systemctl(*args):
    r = subprocess.run(["systemctl", *args], capture_output=True, text=True)
    if r.returncode:
        raise WarmstartError(f"systemctl {' '.join(args)} failed: {r.stderr.strip()}; "
                             f"see `journalctl -u warmstartd`")


def read_stats(paths: HookPaths, refresh: bool = True, timeout_s: float = 2.0) -> Optional[dict]:
    """Ask the daemon to rewrite its stats file (SIGUSR1) and read it."""
    pid = running_pid(paths)
    if pid is None:
        return None
    before = paths.stats.stat().st_mtime_ns if paths.stats.exists() else 0
    if refresh:
        os.kill(pid, signal.SIGUSR1)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if paths.stats.exists() and paths.stats.stat().st_mtime_ns != before:
                break
            time.sleep(0.02)
    try:
        return json.loads(paths.stats.read_text())
    except (OSError, ValueError):
        return None


def start(paths: HookPaths, use_systemd: Optional[bool] = None, cfg: Optional[HookConfig] = None) -> dict:
    """Start the daemon (or leave a running one: it reloads the index on its own)."""
    pid = running_pid(paths)
    if pid is not None:
        return {"started": False, "pid": pid, "how": "already running (reloads the index by itself)"}
    for d in (paths.run, paths.state):   # the shim reads the pidfile, the index and the exports
        d.mkdir(parents=True, exist_ok=True, mode=0o755)
    private_dir(paths.launches)          # one replayer report per launch of every user
    if use_systemd is None:
        use_systemd = systemd_running()
    if use_systemd:
        write_unit(paths, cfg)
        systemctl("daemon-reload")
        systemctl("enable", "--now", "warmstartd.service")
        how = "systemd (warmstartd.service enabled)"
    else:
        log = open_private_append(paths.log)
        try:
            subprocess.Popen(daemon_args(paths, cfg), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                             start_new_session=True, close_fds=True)
        finally:
            log.close()
        how = ("started directly: systemd is not PID 1 here, so nothing restarts warmstartd after "
               "a reboot; run `warmstart hook install` again then")
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        stats = read_stats(paths, timeout_s=0.5)
        if stats and stats.get("worker_pid"):
            return {"started": True, "pid": running_pid(paths), "how": how}
        time.sleep(0.05)
    tail = paths.log.read_text(errors="replace")[-800:] if paths.log.exists() else ""
    stop(paths, use_systemd)
    raise WarmstartError(f"warmstartd did not come up within 5 s; its log says:\n{tail}\n"
                         f"fanotify permission events need root and CONFIG_FANOTIFY_ACCESS_PERMISSIONS; "
                         f"without them use `warmstart hook install --preload`")


def stop(paths: HookPaths, use_systemd: Optional[bool] = None) -> bool:
    """Stop the daemon; True if one was running. Pending execs are allowed by the kernel."""
    if use_systemd is None:
        use_systemd = systemd_running() and paths.unit.exists()
    was = running_pid(paths) is not None
    if use_systemd:
        subprocess.run(["systemctl", "disable", "--now", "warmstartd.service", "warmstart-learner.service"],
                       capture_output=True)
    pid = running_pid(paths)
    if pid is not None:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and running_pid(paths) == pid:
            time.sleep(0.02)
        if running_pid(paths) == pid:
            os.kill(pid, signal.SIGKILL)  # its worker dies with it (PR_SET_PDEATHSIG)
            time.sleep(0.1)
    for f in (paths.pidfile, paths.stats):
        try:
            f.unlink()
        except FileNotFoundError:
            pass
    return was
