"""The launch's task tree and its on-CPU intervals, from sched_process_* and sched_stat_runtime.

The tree is CMD's first task plus every task forked by a task of the tree (threads included:
sched_process_fork fires for clone(CLONE_THREAD) as well). On-CPU time comes from
sched_stat_runtime, which the scheduler emits every time it charges a running task (each tick,
and when the task leaves the CPU) with the nanoseconds charged since the previous charge, so an
event at t with runtime r means the task ran over [t - r, t]. sched_switch pairs would give the
same intervals, but on this kernel (6.18) a task woken from a softirq on an idle CPU starts to
run with no sched_switch at all (24-27 times in each of 12 traced synthetic launches), so switch
pairs lost up to half of a launch's CPU time (docs/recording.md).

Forks is the one process tree of a traced command: the recorder's, the page-use tracer's and
speculation's (fed as their events arrive).
"""

import re
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple

from .events import Event
from ..model import Process

# "comm=%s pid=%d child_comm=%s child_pid=%d": anchored at the end, as a comm may hold anything
# (but not " pid=N child_comm=", 18 characters: a comm has at most 15)
_FORK = re.compile(rb"^comm=.* pid=(\d+) child_comm=.* child_pid=(\d+)\s*$", re.S)
_RUNTIME = re.compile(rb"pid=(\d+) runtime=(\d+)")
_EXEC = re.compile(rb"^filename=(.*) pid=(\d+) old_pid=(\d+)$", re.S)
_EXIT = re.compile(rb"pid=(\d+) prio=\S+ group_dead=(\w+)")


@dataclass
class TaskTree:
    root: int
    tids: Set[int] = field(default_factory=set)
    tgid_of: Dict[int, int] = field(default_factory=dict)
    processes: Dict[int, Process] = field(default_factory=dict)     # by tgid
    intervals: List[Tuple[int, int, int]] = field(default_factory=list)  # (start_ns, end_ns, tid)
    born: Dict[int, int] = field(default_factory=dict)     # tid -> when it was forked (root: the start)

    def tgid(self, tid: int) -> int:
        return self.tgid_of.get(tid, tid)


def fork_of(ev: Event) -> Optional[Tuple[int, int]]:
    """(parent tid, child tid) of a sched_process_fork event; None for any other event."""
    if ev.name != "sched_process_fork":
        return None
    m = _FORK.match(ev.body)
    return (int(m.group(1)), int(m.group(2))) if m else None


class Forks:
    """Who forked whom, in trace order; add() events as they come (any events: forks are kept)."""

    def __init__(self, events: Iterable[Event] = ()):
        self._forks: List[Tuple[int, int, int]] = []   # (time ns, parent tid, child tid)
        self.add(events)

    def add(self, events: Iterable[Event]) -> None:
        for ev in events:
            f = fork_of(ev)
            if f is not None:
                self._forks.append((ev.ts_ns, *f))

    def tree(self, root: int) -> Dict[int, Tuple[Optional[int], Optional[int]]]:
        """{tid: (parent tid, fork time)} of root and every task forked by a task of the tree
        after that task joined it (threads too: clone(CLONE_THREAD) is a fork here); root's
        entry is its own fork if it was traced, else (None, None)."""
        members: Dict[int, Tuple[Optional[int], Optional[int]]] = {root: (None, None)}
        for t, p, c in self._forks:
            if c == root:
                members[root] = (p, t)
            elif p in members:
                members[c] = (p, t)
        return members


def build_tree(events: Sequence[Event], root: int, start_ns: int, end_ns: int) -> TaskTree:
    """Tree, processes and on-CPU intervals (clipped to [start_ns, end_ns]) of the launch."""
    members = Forks(events).tree(root)
    tree = TaskTree(root=root, tids=set(members))
    parent: Dict[int, int] = {c: p for c, (p, _) in members.items() if c != root}
    started: Dict[int, int] = {c: t for c, (_, t) in members.items() if t is not None}
    started.setdefault(root, start_ns)
    tree.born = started
    for ev in events:
        if ev.tgid is not None and ev.tid:
            tree.tgid_of.setdefault(ev.tid, ev.tgid)
    # processes (tgid) with exec paths and exit times
    for tid in tree.tids:
        tg = tree.tgid(tid)
        if tg not in tree.processes:
            ppid = parent.get(tg)
            tree.processes[tg] = Process(pid=tg, tgid=tg, ppid=tree.tgid(ppid) if ppid else None,
                                         start_ns=started.get(tg))
    for ev in events:
        if ev.tid not in tree.tids:
            continue
        proc = tree.processes.get(tree.tgid(ev.tid))
        if ev.name == "sched_process_exec":
            m = _EXEC.match(ev.body)
            if m and proc is not None:
                proc.exec_path = m.group(1)
                proc.comm = None  # the comm after exec is seen on the next event of the task
        elif ev.name == "sched_process_exit":
            m = _EXIT.search(ev.body)
            if m and proc is not None and (m.group(2) == b"true" or ev.tid == proc.pid):
                proc.exit_ns = ev.ts_ns
        if proc is not None and ev.tid == proc.pid and ev.comm and not ev.comm.startswith("<"):
            proc.comm = ev.comm
    # on-CPU intervals: the last match in the body, as a comm may itself contain "pid="
    for ev in events:
        if ev.name != "sched_stat_runtime":
            continue
        m = None
        for m in _RUNTIME.finditer(ev.body):
            pass
        if m and int(m.group(1)) in tree.tids:
            _add(tree, ev.ts_ns - int(m.group(2)), ev.ts_ns, int(m.group(1)), start_ns, end_ns)
    tree.intervals.sort()
    for s, e, tid in tree.intervals:
        proc = tree.processes.get(tree.tgid(tid))
        if proc is not None:
            proc.oncpu_ns += e - s
    return tree


def _add(tree: TaskTree, s: int, e: int, tid: int, lo: int, hi: int) -> None:
    s, e = max(s, lo), min(e, hi)
    if e > s:
        tree.intervals.append((s, e, tid))
