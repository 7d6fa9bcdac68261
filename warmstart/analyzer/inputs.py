"""What the analyzer reads of the database: the app, its voting recordings and their requests,
files, page uses and page adds, through db/recordings.py and in the shared types (model.py)."""

import bisect
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Set, Tuple

from ..db import recordings as db
from ..errors import WarmstartError
from ..model import BlockRequest, FileInfo
from ..recorder.attribution import merge_runs


@dataclass
class RecordingInfo:
    id: int
    launch_time_s: float
    lost_events: int
    status: str
    cpu_total_s: Optional[float]
    warm_cpu_s: Optional[float] = None


def app_id(conn, name: str) -> int:
    row = db.get_app(conn, name)
    if row is None:
        known = [r["name"] for r in db.list_apps(conn)[:10]]
        hint = f" (known: {', '.join(known)})" if known else ""
        raise WarmstartError(f"no app named {name!r}{hint}: record it first with "
                             f"`warmstart record --name {name} -- CMD`")
    return row["id"]


def recordings(conn, app: int, ids: Optional[Sequence[int]] = None) -> List[RecordingInfo]:
    """The app's current recordings (superseded ones no longer vote), or exactly `ids`."""
    rows = db.list_recordings(conn, app)
    out = [RecordingInfo(r["id"], r["launch_time_s"], r["lost_events"], r["status"], r["cpu_total_s"],
                         r["warm_cpu_s"]) for r in rows if ids or r["superseded_by"] is None]
    if ids:
        missing = set(ids) - {r.id for r in out}
        if missing:
            raise WarmstartError(f"recording(s) {sorted(missing)} do not belong to this app: "
                                 f"see `warmstart recordings` for the ids")
        out = [r for r in out if r.id in set(ids)]
    return out


def requests(conn, rid: int) -> List[BlockRequest]:
    return db.load_block_requests(conn, rid)


def files(conn, rids: Sequence[int]) -> List[FileInfo]:
    """The files of the recordings; for a (dev, ino) in several, the newest recording's row."""
    by_key: Dict[Tuple[int, int], FileInfo] = {}
    for rid in sorted(rids):
        for f in db.load_recording_files(conn, rid):
            by_key[(f.dev, f.ino)] = f
    return list(by_key.values())


def used_pages(conn, rids: Sequence[int]) -> Optional[Dict[Tuple[int, int], List[Tuple[int, int]]]]:
    """(dev, ino) -> sorted runs (first, last page) the launches used, over all recordings; None
    if any recording predates page-use tracing (then nothing is trimmed)."""
    if not rids or not all(db.traced_page_uses(conn, rid) for rid in rids):
        return None
    spans: Dict[Tuple[int, int], List[Tuple[int, int]]] = {}
    for rid in rids:
        for u in db.load_page_uses(conn, rid):
            spans.setdefault((u.dev, u.ino), []).append((u.first_index, u.first_index + u.nr_pages - 1))
    # several recordings: their union, as disjoint runs (FileMap bisects them)
    return {key: merge_runs(s) for key, s in spans.items()}


def added_pages(conn, rids: Sequence[int]) -> Optional[Dict[Tuple[int, int], Set[int]]]:
    """(dev, ino) -> page indexes the launches added to the page cache; None without such events."""
    out: Dict[Tuple[int, int], Set[int]] = {}
    for rid in rids:
        for a in db.load_page_cache_adds(conn, rid):
            out.setdefault((a.dev, a.ino), set()).update(range(a.first_index, a.first_index + a.nr_pages))
    return out or None


def read_before_first_add(conn, rids: Sequence[int], keys: Set[Tuple[int, int]]) -> Dict[Tuple[int, int], Tuple[int, int]]:
    """(dev, ino) of a recorded file -> (dev, sector) of the last read the launch completed
    before its first page was added to the cache, in the first recording (by id) that added one:
    where in the launch sequence the file was first needed, as recorded (the place of data inline
    in btrfs's tree moves on every copy-on-write of its leaf, the recorded reads do not)."""
    out: Dict[Tuple[int, int], Tuple[int, int]] = {}
    for rid in sorted(rids):
        first: Dict[Tuple[int, int], int] = {}
        for a in db.load_page_cache_adds(conn, rid):
            key = (a.dev, a.ino)
            if key in keys and key not in out and key not in first:
                first[key] = a.t_ns
        if not first:
            continue
        done = sorted((r.complete_ns if r.complete_ns is not None else r.issue_ns, r.dev, r.sector)
                      for r in requests(conn, rid) if not r.is_write)
        ends = [t for t, _, _ in done]
        for key, t in first.items():
            i = bisect.bisect_right(ends, t) - 1
            if i >= 0:
                out[key] = done[i][1:]
    return out
