"""The launch's task tree and its on-CPU intervals, from sched_process_* and sched_stat_runtime.

The tree is CMD's first task plus every task forked by a task of the tree (threads included:
sched_process_fork fires for clone(CLONE_THREAD) as well). On-CPU time comes from
sched_stat_runtime, which the scheduler emits every time it charges a running task (each tick,
and when the task leaves the CPU) with the nanoseconds charged since the previous charge, so an
event at t with runtime r means the task ran over [t - r, t]. sched_switch pairs would give the
same intervals, but on this kernel (6.18) a task woken from a softirq on an idle CPU starts to
run with no sched_switch at all (24-27 times in each of 12 traced synthetic launches), so switch
pairs lost up to half of a launch's CPU time (docs/recording.md).
"""

import re
from dataclasses import dataclass, field
from typing import Dict, List, Sequence, Set, Tuple

from .events import Event, kv
from ..model import Process

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

    def tgid(self, tid: int) -> int:
        return self.tgid_of.get(tid, tid)


def build_tree(events: Sequence[Event], root: int, start_ns: int, end_ns: int) -> TaskTree:
    """Tree, processes and on-CPU intervals (clipped to [start_ns, end_ns]) of the launch."""
    tree = TaskTree(root=root, tids={root})
    parent: Dict[int, int] = {}
    started: Dict[int, int] = {root: start_ns}
    for ev in events:
        if ev.tgid is not None and ev.tid:
            tree.tgid_of.setdefault(ev.tid, ev.tgid)
        if ev.name == "sched_process_fork":
            f = kv(ev.body)
            p, c = int(f.get("pid", b"-1")), int(f.get("child_pid", b"-1"))
            if c == root:
                started[root] = ev.ts_ns
            elif p in tree.tids:
                tree.tids.add(c)
                parent[c] = p
                started[c] = ev.ts_ns
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
