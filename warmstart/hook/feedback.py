"""Accuracy feedback for hooked launches: what the replayer prefetched, what the launch read that
the schedule did not cover, a `launches` row (mode "hook"), and re-learning when it gets worse.

Measured after the launch from what is left in the page cache (mincore of the scheduled files):
  prefetched  = the replayer's bytes_fetched (its stats JSON, written when the app exits)
  missed      = resident bytes of the scheduled files OUTSIDE the scheduled ranges: the launch
                read them and the schedule did not have them (a changed file, a new code path)
  hit ratio   = scheduled bytes resident / (scheduled bytes resident + missed)
Limits (honest): reads of files that are not in the schedule at all are not seen (that needs
filemap tracing); a prefetched page the app never touched cannot be told from a used one, so
this is coverage of the launch's reads, not precision of the prefetch; and a launch that found
its data already cached (replayer bytes_resident > half the schedule) is stored but not judged.
"""

import ctypes
import mmap
import os
from typing import Dict, List, Optional, Tuple

from ..db import launches
from ..db.schedules import load_schedule, mark_stale

PAGE = os.sysconf("SC_PAGE_SIZE")
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]


def resident_pages(path: bytes) -> Optional[List[bool]]:
    """Per page of the file: in the page cache (mincore of a shared read-only mapping, which
    faults nothing in)? None if it cannot be opened or mapped."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return []
        addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            return None
        try:
            vec = (ctypes.c_ubyte * ((size + PAGE - 1) // PAGE))()
            if _libc.mincore(ctypes.c_void_p(addr), ctypes.c_size_t(size), vec) != 0:
                return None
            return [bool(v & 1) for v in vec]
        finally:
            _libc.munmap(ctypes.c_void_p(addr), ctypes.c_size_t(size))
    except OSError:
        return None
    finally:
        os.close(fd)


def measure(schedule) -> Dict[str, int]:
    """Bytes of the scheduled files resident inside and outside the scheduled ranges."""
    wanted: Dict[bytes, set] = {}
    for seg in schedule.segments:
        for r in seg.ranges:
            if r.file is None or r.file_offset is None:
                continue
            pages = wanted.setdefault(r.file.path, set())
            pages.update(range(r.file_offset // PAGE, (r.file_offset + r.length + PAGE - 1) // PAGE))
    inside = outside = files = 0
    for path, pages in wanted.items():
        res = resident_pages(path)
        if res is None:
            continue
        files += 1
        for i, r in enumerate(res):
            if r:
                if i in pages:
                    inside += PAGE
                else:
                    outside += PAGE
    return {"scheduled_resident_bytes": inside, "missed_bytes": outside, "files_checked": files}


def judge(conn, event: dict, stats: Optional[dict], launch_time_s: Optional[float],
          threshold: float) -> Tuple[int, dict]:
    """Store the launches row of one hooked launch; returns (launch id, verdict)."""
    sid = event["schedule_id"]
    sched = load_schedule(conn, sid)
    row = conn.execute("SELECT app_id FROM schedules WHERE id = ?", (sid,)).fetchall()[0]
    m = measure(sched)
    stats = stats or {}
    scheduled = stats.get("bytes_scheduled") or sched.total_bytes or 1
    warm = (stats.get("bytes_resident") or 0) > scheduled / 2
    covered = m["scheduled_resident_bytes"]
    hit = covered / (covered + m["missed_bytes"]) if covered + m["missed_bytes"] else None
    prev = [l["details"].get("feedback", {}).get("missed_bytes") for l in
            launches.list_launches(conn, app_id=row["app_id"], mode="hook")][-5:]
    prev = sorted(x for x in prev if x is not None)
    baseline = prev[len(prev) // 2] if prev else None
    grew = baseline is not None and m["missed_bytes"] > max(2 * baseline, baseline + 4 * 2**20)
    relearn = not warm and hit is not None and (hit < threshold or grew)
    verdict = {**m, "hit_ratio": hit, "warm_before": warm, "threshold": threshold,
               "missed_baseline_bytes": baseline, "relearn": relearn,
               "reason": None if not relearn else
               (f"hit ratio {hit:.0%} below {threshold:.0%}" if hit < threshold else
                f"misses grew to {m['missed_bytes']} B (median before {baseline} B)")}
    lid = launches.insert_launch(
        conn, mode="hook", launch_time_s=launch_time_s if launch_time_s is not None else -1.0,
        app_id=row["app_id"], schedule_id=sid, mechanism=stats.get("engine"),
        prefetched_bytes=stats.get("bytes_fetched"), used_bytes=covered + m["missed_bytes"],
        prefetched_used_bytes=covered,
        details={"hook_event": event, "replay": stats, "feedback": verdict})
    if relearn:
        mark_stale(conn, sid)  # leaves the index at the next refresh; learn=auto re-records it
    return lid, verdict
