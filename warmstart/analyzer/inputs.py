"""What the analyzer reads of the database: the app, its voting recordings and their requests,
files, page uses and page adds, through db/recordings.py and in the shared types (model.py)."""

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
