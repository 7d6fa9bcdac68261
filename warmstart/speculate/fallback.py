"""The first launch of an app warmstart has never recorded: run CMD with the chosen mechanisms.

  spec    static ld.so pre-resolution + the sandboxed speculative copy (sandbox.py)
  online  the per-stream pattern prefetcher (online.py)
  both    all of them;  none: a plain launch, measured the same way (the baseline)

One tracefs instance (tracer.py) watches the page cache for all mechanisms, so accuracy
(prefetched-and-used / used) and waste (prefetched-unused / prefetched) are measured alike.
The copy is bounded while the launch runs: frozen when it is more than the horizon ahead,
killed when it falls behind (the launch has read more than it), when it exceeds the memory cap,
and always when the launch ends.
"""

import os
import threading
import time
from dataclasses import dataclass, field
from typing import Dict, Optional, Sequence, Set, Tuple

from .. import launching
from ..errors import WarmstartError
from .online import OnlinePrefetcher
from .preresolve import launch_files, resolve_in_root
from .sandbox import SandboxLimits, SpeculativeCopy, split_chroot, tree_pids, wait_gone
from .tracer import PAGE, Tracer

MECHANISMS = ("none", "spec", "online", "both")
ONLINE_INTERVAL_S = 0.05
MONITOR_EVERY_S = 0.02
# Reactive cost/benefit (paper §6): the copy helps only while it is ahead of the launch; a copy
# that trails it repeats the launch's work on the other core and its I/O for nothing (bench
# --unknown: synth 1.05-1.15x slower with a trailing copy). Killed when, once it has started
# reading, it has read less than the launch for this long.
BEHIND_GRACE_S = 0.15
BEHIND_SLACK_BYTES = 0
HORIZON_BYTES = 64 << 20      # the copy is frozen when it has read this much more than the launch

Key = Tuple[int, int]


@dataclass
class FallbackResult:
    mechanism: str
    launch_time_s: float
    end_reason: str
    exit_status: Optional[int]
    output: bytes
    used_pages: int = 0
    prefetched_pages: int = 0
    prefetched_used_pages: int = 0
    by_mechanism: Dict[str, Dict[str, int]] = field(default_factory=dict)  # prefetched/used pages
    copy: Dict[str, object] = field(default_factory=dict)
    online: Dict[str, object] = field(default_factory=dict)
    lost_events: int = 0

    @property
    def accuracy(self) -> Optional[float]:
        return self.prefetched_used_pages / self.used_pages if self.used_pages else None

    @property
    def waste(self) -> Optional[float]:
        if not self.prefetched_pages:
            return None
        return (self.prefetched_pages - self.prefetched_used_pages) / self.prefetched_pages

    def as_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k != "output"}
        d.update(accuracy=self.accuracy, waste=self.waste, output_bytes=len(self.output))
        return d


def tree_rchar(root: int) -> int:
    total = 0
    for pid in tree_pids(root):
        try:
            with open(f"/proc/{pid}/io") as f:
                total += int(next(l for l in f if l.startswith("rchar:")).split()[1])
        except (OSError, StopIteration, ValueError):
            pass
    return total


class FileFinder:
    """(dev, ino) -> an fd of that file, found among the launch's open and mapped files."""

    def __init__(self):
        self.app_pid: Optional[int] = None
        self.fds: Dict[Key, int] = {}
        self.fss = None

    def __call__(self, key: Key) -> Optional[int]:
        if key in self.fds:
            return self.fds[key]
        if self.app_pid is None:
            return None
        if self.fss is None:
            from ..fs import FileSystems
            self.fss = FileSystems()
        for pid in tree_pids(self.app_pid):
            cands = []
            try:
                cands += [f"/proc/{pid}/fd/{n}" for n in os.listdir(f"/proc/{pid}/fd")]
                cands += [f"/proc/{pid}/map_files/{n}" for n in os.listdir(f"/proc/{pid}/map_files")]
            except OSError:
                continue
            for c in cands:
                try:
                    st = os.stat(c)
                except OSError:
                    continue
                if st.st_ino == key[1] and self.fss.cache_key_of(c, st) == key:
                    try:
                        self.fds[key] = os.open(c, os.O_RDONLY | os.O_CLOEXEC)
                    except OSError:
                        continue
                    return self.fds[key]
        return None

    def close(self):
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()


def _pages(ranges: Dict[Key, Set[int]]) -> int:
    return sum(len(v) for v in ranges.values())


def _preresolve_prefetch(argv, root, env, out: Dict[Key, Set[int]], ra_max: int) -> None:
    """Readahead every library ld.so will map, in inode order (a proxy for disk order), each up
    to ra_max bytes (the copy's per-file cap: a huge executable is mostly not touched)."""
    from ..fs import FileSystems
    fss = FileSystems()
    found = []
    for p in launch_files(argv, root, env):
        host = resolve_in_root(root, p)
        if host is None:
            continue
        try:
            st = os.stat(host)
        except OSError:
            continue
        found.append((*fss.cache_key_of(host, st), host, st.st_size))
    for dev, ino, host, size in sorted(set(found)):
        try:
            fd = os.open(host, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        size = min(size, ra_max)
        try:
            for off in range(0, size, 128 << 10):
                os.readahead(fd, off, 128 << 10) if hasattr(os, "readahead") else \
                    os.posix_fadvise(fd, off, 128 << 10, os.POSIX_FADV_WILLNEED)
        except OSError:
            pass
        finally:
            os.close(fd)
        out[(dev, ino)] = set(range(0, (size + PAGE - 1) // PAGE))


def run_fallback_launch(argv: Sequence, mechanism: str = "both", until="exit", timeout: float = 60.0,
                        *, cwd=None, env=None, limits: SandboxLimits = SandboxLimits(),
                        c_switch_s: Optional[float] = None, r_tr_bps: Optional[float] = None,
                        horizon_bytes: int = HORIZON_BYTES, passthrough: bool = False,
                        trace: bool = True) -> FallbackResult:
    """Launch argv with the chosen mechanism(s); return launch time, accuracy and waste.

    The caller makes the cache cold first if it wants a cold launch (bench does).
    trace=False skips the tracer (no accuracy/waste, and no online mechanism).
    """
    if mechanism not in MECHANISMS:
        raise WarmstartError(f"unknown mechanism {mechanism!r}: use one of {', '.join(MECHANISMS)}")
    if isinstance(until, str):
        until = launching.parse_until(until)
    use_spec = mechanism in ("spec", "both")
    use_online = mechanism in ("online", "both")
    if use_online and not trace:
        raise WarmstartError("the online mechanism needs the tracer: drop --no-trace")
    root, cenv, cargv = _command_in_root(argv, env)
    pre: Dict[Key, Set[int]] = {}
    tracer = Tracer() if trace else None
    finder = FileFinder()
    events = _EventLog(tracer, finder)
    online = _OnlineLoop(finder, events, c_switch_s, r_tr_bps) if use_online else None
    copy: Optional[SpeculativeCopy] = None
    copy_info: Dict[str, object] = {}
    mon = {"last": 0.0, "behind_since": None, "frozen_s": 0.0, "frozen_at": None, "max_rss": 0}

    def on_started(pid):
        finder.app_pid = pid
        if online is not None:
            online.start()

    try:
        if tracer is not None:
            tracer.start()
        if use_spec:
            copy = _start_speculation(cargv, root, cenv, cwd, limits, pre)
        res = launching.launch(argv, until, timeout, cwd=cwd, env=env, passthrough=passthrough, on_started=on_started,
                               keep_running=_CopyMonitor(copy, finder, limits, horizon_bytes, mon))
    finally:
        if online is not None:
            online.stop.set()
        if copy is not None:
            copy_info = _end_copy(copy, mon)
        if online is not None:
            online.join()
        if tracer is not None:
            tracer.stop()
        finder.close()
    result = FallbackResult(mechanism=mechanism, launch_time_s=res.launch_time_s, end_reason=res.end_reason,
                            exit_status=res.exit_status, output=res.output, copy=copy_info)
    if tracer is None:
        return result
    events.take()   # the events since the online loop's last take, for the accounting
    return _account(result, tracer, events.all, res.pid, pre, online.prefetcher if online else None, copy)


def _command_in_root(argv: Sequence, env) -> Tuple[bytes, dict, list]:
    """(root, environment, argv) of the command a chroot/env wrapper in argv runs (split_chroot):
    its environment is env (default ours) with the wrapper's settings, unless it clears it."""
    root, cenv, cargv, clear = split_chroot(argv)
    if not clear:
        base = os.environb.copy() if env is None else {os.fsencode(k): os.fsencode(v) for k, v in env.items()}
        cenv = {**base, **cenv}
    return root, cenv, cargv


def _start_speculation(cargv, root, cenv, cwd, limits: SandboxLimits, pre: Dict[Key, Set[int]]) -> SpeculativeCopy:
    """The spec mechanism: ld.so pre-resolution (what it prefetched lands in pre), then the
    sandboxed speculative copy of the command, started."""
    # Pre-resolution first: a few header reads, then the libraries are on their way
    # before the copy or the launch asks for them.
    threading.Thread(target=_preresolve_prefetch, args=(cargv, root, cenv, pre, limits.ra_max), daemon=True).start()
    return SpeculativeCopy(cargv, root=root, cwd=os.fsencode(cwd) if cwd and root == b"/" else None,
                           env={k: v for k, v in cenv.items()}, limits=limits).start()


def _end_copy(copy: SpeculativeCopy, mon: dict) -> Dict[str, object]:
    """Kill the copy (the launch ended); what it did, for FallbackResult.copy."""
    pids = copy.pids()
    copy.kill("launch ended")
    return {"killed_reason": copy.killed_reason, "exit_status": copy.exit_status,
            "prefetched_files": len(copy.prefetched), "totals": copy.totals,
            "still_alive_after_kill": wait_gone(pids), "max_rss_bytes": mon["max_rss"],
            "frozen_s": round(mon["frozen_s"], 3),
            "errors": copy.errors.decode(errors="replace")[-500:]}


class _EventLog:
    """The tracer's events, all kept for the accounting; take() also returns the launch's own."""

    def __init__(self, tracer: Optional[Tracer], finder: FileFinder):
        self.tracer, self.finder, self.all = tracer, finder, []

    def take(self) -> list:
        evs = self.tracer.take()
        self.all.extend(evs)
        app = self.finder.app_pid
        if app is None:
            return []
        tree = self.tracer.tree(app)
        return [e for e in evs if e.pid in tree]


class _OnlineLoop:
    """The online mechanism: a thread feeding the launch's events to the per-stream prefetcher
    every ONLINE_INTERVAL_S, from start() (the app's fork) until stop is set."""

    def __init__(self, finder: FileFinder, events: _EventLog, c_switch_s: Optional[float],
                 r_tr_bps: Optional[float]):
        kw = {k: v for k, v in (("c_switch_s", c_switch_s), ("r_tr_bps", r_tr_bps)) if v is not None}
        self.prefetcher = OnlinePrefetcher(finder, **kw)
        self.events = events
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self.stop.wait(ONLINE_INTERVAL_S):
            self.prefetcher.step(self.events.take())

    def start(self) -> None:
        self.thread.start()

    def join(self) -> None:
        if self.thread.is_alive():
            self.thread.join(timeout=5)


class _CopyMonitor:
    """Called by launch() while the app runs: caps the speculative copy's memory, kills it when
    it falls behind the app, freezes it while it is more than the horizon ahead."""

    def __init__(self, copy, finder, limits: SandboxLimits, horizon_bytes: int, mon: dict):
        self.copy, self.finder, self.limits, self.horizon_bytes, self.mon = copy, finder, limits, horizon_bytes, mon

    def __call__(self):
        copy, finder, limits, horizon_bytes, mon = self.copy, self.finder, self.limits, self.horizon_bytes, self.mon
        now = time.monotonic()
        if copy is None or now - mon["last"] < MONITOR_EVERY_S or not copy.running():
            return
        mon["last"] = now
        rss = copy.rss_bytes()
        mon["max_rss"] = max(mon["max_rss"], rss)
        if rss > limits.rss_max:
            copy.kill("memory cap")
            return
        progress = copy.progress_bytes()
        ahead = progress - tree_rchar(finder.app_pid)
        # judged once the copy runs CMD (it has read something): its sandbox set-up is no race
        if progress > 0 and ahead < -BEHIND_SLACK_BYTES:
            mon["behind_since"] = mon["behind_since"] or now
            if now - mon["behind_since"] > BEHIND_GRACE_S:
                copy.kill("not ahead")
                return
        else:
            mon["behind_since"] = None
        if ahead > horizon_bytes:
            if mon["frozen_at"] is None:
                copy.freeze()
                mon["frozen_at"] = now
        elif mon["frozen_at"] is not None:
            copy.thaw()
            mon["frozen_s"] += now - mon["frozen_at"]
            mon["frozen_at"] = None


def _account(result: FallbackResult, tracer, app_events, app_pid: int, pre, prefetcher, copy) -> FallbackResult:
    """Accuracy and waste per mechanism, from what the launch itself touched."""
    result.lost_events = tracer.lost
    used: Dict[Key, Set[int]] = {}
    tree = tracer.tree(app_pid)
    for e in app_events:
        # used = what the launch itself touched (its reads, faults, mapped pages, misses)
        if os.major(e.dev) == 0 or e.pid not in tree:
            continue
        used.setdefault((e.dev, e.ino), set()).update(range(e.first, e.first + e.npages))
    sources: Dict[str, Dict[Key, Set[int]]] = {"preresolve": pre, "online": prefetcher.prefetched if prefetcher else {}}
    if copy is not None:
        sp: Dict[Key, Set[int]] = {}
        for f in copy.prefetched:
            sp.setdefault((f.dev, f.ino), set()).update(range(0, (f.nbytes + PAGE - 1) // PAGE))
        sources["speculation"] = sp
    union: Dict[Key, Set[int]] = {}
    for name, ranges in sources.items():
        hit = sum(len(p & used.get(k, set())) for k, p in ranges.items())
        result.by_mechanism[name] = {"prefetched_pages": _pages(ranges), "prefetched_used_pages": hit}
        for k, p in ranges.items():
            union.setdefault(k, set()).update(p)
    result.used_pages = _pages(used)
    result.prefetched_pages = _pages(union)
    result.prefetched_used_pages = sum(len(p & used.get(k, set())) for k, p in union.items())
    if prefetcher is not None:
        result.online = {"S": prefetcher.S, "depth_max_pages": prefetcher.depth_max,
                         "streams": len(prefetcher.streams), "adjustments": prefetcher.history[-10:],
                         "off_reason": prefetcher.off_reason, "judged_pages": prefetcher.judged_pages,
                         "judged_used_pages": prefetcher.judged_used}
    return result
