"""What the analyzer reads from a recording: the app, its recordings, requests, files, page adds.

Plain SELECTs on the tables of schema.py (read-only), returning the analyzer's own types.
"""

import json
import sqlite3
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Set, Tuple

from ..errors import WarmstartError
from ..db.schedules import Extent
from ..recorder.attribution import merge_runs
from .filemap import RecordedFile
from .sequence import Request


@dataclass
class RecordingInfo:
    id: int
    launch_time_s: float
    lost_events: int
    status: str
    cpu_total_s: Optional[float]
    warm_cpu_s: Optional[float] = None


def app_id(conn: sqlite3.Connection, name: str) -> int:
    row = conn.execute("SELECT id FROM apps WHERE name = ?", (name,)).fetchone()
    if row is None:
        known = [r[0] for r in conn.execute("SELECT name FROM apps ORDER BY name LIMIT 10")]
        hint = f" (known: {', '.join(known)})" if known else ""
        raise WarmstartError(f"no app named {name!r}{hint}: record it first with "
                             f"`warmstart record --name {name} -- CMD`")
    return row[0]


def recordings(conn: sqlite3.Connection, app: int, ids: Optional[Sequence[int]] = None) -> List[RecordingInfo]:
    """The app's current recordings (superseded ones no longer vote), or exactly `ids`."""
    rows = conn.execute("SELECT id, launch_time_s, lost_events, status, cpu_total_s, warm_cpu_s, superseded_by"
                        " FROM recordings WHERE app_id = ? ORDER BY id", (app,)).fetchall()
    out = [RecordingInfo(*r[:6]) for r in rows if ids or r[6] is None]
    if ids:
        missing = set(ids) - {r.id for r in out}
        if missing:
            raise WarmstartError(f"recording(s) {sorted(missing)} do not belong to this app: "
                                 f"see `warmstart recordings` for the ids")
        out = [r for r in out if r.id in set(ids)]
    return out


def requests(conn: sqlite3.Connection, rid: int) -> List[Request]:
    rows = conn.execute("SELECT dev, sector, nr_sectors, is_write, is_meta, cpu_before_ns FROM block_requests"
                        " WHERE recording_id = ? ORDER BY seq", (rid,))
    return [Request(r[0], r[1], r[2], bool(r[3]), bool(r[4]), r[5] or 0) for r in rows]


def files(conn: sqlite3.Connection, rids: Sequence[int]) -> List[RecordedFile]:
    """The files of the recordings; for a (dev, ino) in several, the newest recording's row."""
    by_key: Dict[Tuple[int, int], RecordedFile] = {}
    for rid in sorted(rids):
        for r in conn.execute("SELECT dev, ino, path, size, mtime_ns, ctime_ns, extents_json FROM recording_files"
                              " WHERE recording_id = ?", (rid,)):
            exts = None if r[6] is None else tuple(Extent(*e) for e in json.loads(r[6]))
            by_key[(r[0], r[1])] = RecordedFile(r[0], r[1], bytes(r[2]) if r[2] is not None else None,
                                                r[3], r[4], r[5], exts)
    return list(by_key.values())


def used_pages(conn: sqlite3.Connection, rids: Sequence[int]) -> Optional[Dict[Tuple[int, int], List[Tuple[int, int]]]]:
    """(dev, ino) -> sorted runs (first, last page) the launches used, over all recordings; None
    if any recording predates page-use tracing (then nothing is trimmed)."""
    if not rids:
        return None
    traced = conn.execute(f"SELECT COUNT(*) FROM recordings WHERE id IN ({','.join('?' * len(rids))})"
                          " AND json_extract(env_json, '$.used_pages') IS NOT NULL", list(rids)).fetchone()[0]
    if traced < len(rids):
        return None
    spans: Dict[Tuple[int, int], List[Tuple[int, int]]] = {}
    for rid in rids:
        for dev, ino, first, n in conn.execute("SELECT dev, ino, first_index, nr_pages FROM page_uses"
                                               " WHERE recording_id = ?", (rid,)):
            spans.setdefault((dev, ino), []).append((first, first + n - 1))
    # several recordings: their union, as disjoint runs (FileMap bisects them)
    return {key: merge_runs(s) for key, s in spans.items()}


def added_pages(conn: sqlite3.Connection, rids: Sequence[int]) -> Optional[Dict[Tuple[int, int], Set[int]]]:
    """(dev, ino) -> page indexes the launches added to the page cache; None without such events."""
    out: Dict[Tuple[int, int], Set[int]] = {}
    any_rows = False
    for rid in rids:
        for dev, ino, first, n in conn.execute("SELECT dev, ino, first_index, nr_pages FROM page_cache_adds"
                                               " WHERE recording_id = ?", (rid,)):
            any_rows = True
            out.setdefault((dev, ino), set()).update(range(first, first + n))
    return out if any_rows else None
