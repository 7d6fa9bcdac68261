"""All SQL for schedules: schedules, segments, schedule_ranges, schedule_files, file_extents.

The analyzer writes a schedule with save_schedule(); the replayer and `show` read it with
load_active_schedule() / load_schedule(), which return plain dataclasses (no sqlite3 rows), so
callers never see the table layout. Units follow schema.py: sectors of 512 bytes for block
ranges, bytes for file offsets, seconds for t_* fields.
"""

import json
import sqlite3
import time
from typing import Dict, List, Optional, Sequence, Tuple

from ..errors import WarmstartError
from ..model import Extent, Range, Schedule, ScheduledFile, Segment
from .connection import transaction
from .rows import bad, check, check_all, json_list_of


def _app_id(conn: sqlite3.Connection, app_name: str) -> int:
    row = conn.execute("SELECT id FROM apps WHERE name = ?", (app_name,)).fetchone()
    if row is None:
        raise WarmstartError(f"no app named {app_name!r} in the database: "
                             f"record it first with `warmstart record --name {app_name} -- CMD`")
    return row["id"]


def save_schedule(conn: sqlite3.Connection, sched: Schedule, app_id: Optional[int] = None,
                  activate: bool = True) -> int:
    """Store `sched` (one transaction) and return its id; it becomes the app's active schedule
    unless activate=False. Every file a range points at must be in sched.files."""
    with transaction(conn):
        return insert_schedule(conn, sched, app_id, activate)


def insert_schedule(conn: sqlite3.Connection, sched: Schedule, app_id: Optional[int] = None,
                    activate: bool = True) -> int:
    """save_schedule inside the caller's transaction."""
    if app_id is None:
        app_id = _app_id(conn, sched.app_name)
    file_no = {f: i for i, f in enumerate(sched.files)}
    if activate:
        conn.execute("UPDATE schedules SET active = 0 WHERE app_id = ?", (app_id,))
    cur = conn.execute(
        "INSERT INTO schedules (app_id, created_at, algorithm, probe, profile_id, recording_ids,"
        " t_exp_s, total_bytes, waste_bytes, stale, active, params_json)"
        " VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
        (app_id, sched.created_at or time.time(), sched.algorithm, sched.probe, sched.profile_id,
         json.dumps(list(sched.recording_ids)), sched.t_exp_s, sched.total_bytes,
         sched.waste_bytes, int(sched.stale), int(activate), json.dumps(sched.params, sort_keys=True)))
    sid = cur.lastrowid
    conn.executemany(
        "INSERT INTO schedule_files (schedule_id, file_no, path, dev, ino, size, mtime_ns, ctime_ns)"
        " VALUES (?,?,?,?,?,?,?,?)",
        [(sid, i, f.path, f.dev, f.ino, f.size, f.mtime_ns, f.ctime_ns) for i, f in enumerate(sched.files)])
    conn.executemany(
        "INSERT INTO file_extents (schedule_id, file_no, logical, physical, length, flags)"
        " VALUES (?,?,?,?,?,?)",
        [(sid, i, e.logical, e.physical, e.length, e.flags)
         for i, exts in sched.extents.items() for e in exts])
    for seg in sched.segments:
        conn.execute(
            "INSERT INTO segments (schedule_id, idx, first_p, last_p, t_disk_s, cpu_s, bytes)"
            " VALUES (?,?,?,?,?,?,?)",
            (sid, seg.idx, seg.first_p, seg.last_p, seg.t_disk_s, seg.cpu_s, seg.bytes))
        rows = []
        for ord_, r in enumerate(seg.ranges):
            if r.file is not None and r.file not in file_no:
                raise ValueError(f"range points at a file not in the schedule: {r.file.path!r}")
            rows.append((sid, seg.idx, ord_, r.dev, r.sector, r.nr_sectors,
                         None if r.file is None else file_no[r.file], r.file_offset, r.length, r.orig_pos))
        conn.executemany(
            "INSERT INTO schedule_ranges (schedule_id, segment_idx, ord, dev, sector, nr_sectors,"
            " file_no, file_offset, length, orig_pos) VALUES (?,?,?,?,?,?,?,?,?,?)", rows)
    sched.id = sid
    return sid


def load_schedule(conn: sqlite3.Connection, schedule_id: int) -> Schedule:
    """The schedule with this id, segments in order, each segment's ranges in fetch order."""
    s = conn.execute("SELECT s.*, a.name AS app_name FROM schedules s JOIN apps a ON a.id = s.app_id"
                     " WHERE s.id = ?", (schedule_id,)).fetchone()
    if s is None:
        raise WarmstartError(f"no schedule with id {schedule_id}: list them with `warmstart show APP --all`")
    check("schedules", s)
    recording_ids = json_list_of("schedules", s, "recording_ids", (int,))
    files = []
    for r in check_all("schedule_files", conn.execute(
            "SELECT * FROM schedule_files WHERE schedule_id = ? ORDER BY file_no", (schedule_id,))):
        if r["file_no"] != len(files):   # ranges name files by their number: no gap, no repeat
            raise bad("schedule_files", r, "file_no", f"is not the next file number ({len(files)})")
        files.append(ScheduledFile(bytes(r["path"]), r["dev"], r["ino"], r["size"], r["mtime_ns"], r["ctime_ns"]))
    extents: Dict[int, List[Extent]] = {}
    for r in check_all("file_extents", conn.execute(
            "SELECT * FROM file_extents WHERE schedule_id = ? ORDER BY file_no, logical", (schedule_id,))):
        if r["file_no"] >= len(files):
            raise bad("file_extents", r, "file_no", "names no file of the schedule")
        extents.setdefault(r["file_no"], []).append(Extent(r["logical"], r["physical"], r["length"], r["flags"]))
    segments = []
    for r in check_all("segments", conn.execute("SELECT * FROM segments WHERE schedule_id = ? ORDER BY idx",
                                                (schedule_id,))):
        if r["first_p"] > r["last_p"]:
            raise bad("segments", r, "first_p", f"is after last_p ({r['last_p']})")
        segments.append(Segment(r["idx"], r["first_p"], r["last_p"], r["t_disk_s"], r["cpu_s"], r["bytes"]))
    by_idx = {seg.idx: seg for seg in segments}
    for r in check_all("schedule_ranges", conn.execute(
            "SELECT * FROM schedule_ranges WHERE schedule_id = ? ORDER BY segment_idx, ord", (schedule_id,))):
        if r["segment_idx"] not in by_idx:
            raise bad("schedule_ranges", r, "segment_idx", "names no segment of the schedule")
        if r["file_no"] is not None and (r["file_no"] >= len(files) or r["file_offset"] is None):
            raise bad("schedule_ranges", r, "file_no", "names no file of the schedule, or has no file_offset")
        f = None if r["file_no"] is None else files[r["file_no"]]
        by_idx[r["segment_idx"]].ranges.append(
            Range(r["dev"], r["sector"], r["nr_sectors"], r["length"], f, r["file_offset"], r["orig_pos"]))
    return Schedule(id=s["id"], app_name=s["app_name"], algorithm=s["algorithm"], probe=s["probe"],
                    t_exp_s=s["t_exp_s"], total_bytes=s["total_bytes"], waste_bytes=s["waste_bytes"],
                    recording_ids=recording_ids, segments=segments, files=files,
                    extents=extents, profile_id=s["profile_id"], created_at=s["created_at"],
                    stale=bool(s["stale"]), params=json.loads(s["params_json"]))


def load_active_schedule(conn: sqlite3.Connection, app_name: str) -> Optional[Schedule]:
    """The schedule `run` should use for app_name, or None if it has none (not yet analyzed).
    Raises WarmstartError for an unknown app."""
    app_id = _app_id(conn, app_name)
    row = conn.execute("SELECT id FROM schedules WHERE app_id = ? AND active = 1 ORDER BY id DESC LIMIT 1",
                       (app_id,)).fetchone()
    return None if row is None else load_schedule(conn, row["id"])


def list_schedules(conn: sqlite3.Connection, app_name: str) -> List[dict]:
    """Summary rows (id, created_at, algorithm, probe, t_exp_s, total_bytes, active) of an app's schedules."""
    app_id = _app_id(conn, app_name)
    return [dict(r) for r in check_all("schedules", conn.execute(
        "SELECT id, created_at, algorithm, probe, t_exp_s, total_bytes, waste_bytes, active, stale"
        " FROM schedules WHERE app_id = ? ORDER BY id", (app_id,)))]


def active_schedule_summary(conn: sqlite3.Connection, app_name: str) -> Optional[dict]:
    """id, algorithm, t_exp_s and number of segments of the app's active schedule, or None."""
    row = conn.execute("SELECT s.id, s.algorithm, s.t_exp_s, (SELECT COUNT(*) FROM segments g WHERE"
                       " g.schedule_id = s.id) AS segments FROM schedules s JOIN apps a ON a.id = s.app_id"
                       " WHERE a.name = ? AND s.active = 1", (app_name,)).fetchone()
    if row is None:
        return None
    check("schedules", row)
    return {"id": row["id"], "algorithm": row["algorithm"], "t_exp_s": row["t_exp_s"], "segments": row["segments"]}


def app_of_schedule(conn: sqlite3.Connection, schedule_id: int) -> int:
    return conn.execute("SELECT app_id FROM schedules WHERE id = ?", (schedule_id,)).fetchone()[0]


def schedule_t_exp(conn: sqlite3.Connection, schedule_id: int) -> Optional[Tuple[float, float]]:
    """The schedule's expected launch time (t_exp_s) and the modelled metadata step before its
    first segment's data inside it (its share of segment 1, or the whole step where it was all
    before segment 1: analyzer.access.metadata_step; 0 if none), None if the schedule is gone."""
    row = conn.execute("SELECT t_exp_s, coalesce(json_extract(params_json, '$.metadata_step.segments_s[0]'), "
                       "json_extract(params_json, '$.metadata_step.t_s')) FROM schedules "
                       "WHERE id = ?", (schedule_id,)).fetchone()
    return None if row is None else (row[0], float(row[1] or 0.0))


def trial_schedules(conn: sqlite3.Connection, schedule_id: int) -> List[int]:
    """The schedule and the other one of its segmented-or-whole trial (hook/trial.py: the whole
    variant's `whole_of`, the segmented one's `whole_variant`), if it has one: one app's prefetch,
    whose launches the feedback judges together."""
    row = conn.execute("SELECT id, params_json FROM schedules WHERE id = ?", (schedule_id,)).fetchone()
    if row is None:
        return [schedule_id]
    params = json.loads(check("schedules", row)["params_json"] or "{}")
    return [schedule_id] + [x for x in (params.get("whole_of"), params.get("whole_variant")) if isinstance(x, int)]


def activate_schedule(conn: sqlite3.Connection, app_name: str, schedule_id: int) -> None:
    """Make schedule_id the one `run` and the hook use for the app (the others stay, inactive)."""
    conn.execute("UPDATE schedules SET active = (id = ?) WHERE app_id = (SELECT id FROM apps WHERE name = ?)",
                 (schedule_id, app_name))


def set_schedule_param(conn: sqlite3.Connection, schedule_id: int, key: str, value) -> None:
    """Replace one key of a schedule's params (JSON-safe value)."""
    conn.execute("UPDATE schedules SET params_json = json_set(params_json, '$.' || ?, json(?)) WHERE id = ?",
                 (key, json.dumps(value), schedule_id))


def mark_stale(conn: sqlite3.Connection, schedule_id: int, stale: bool = True, reason: Optional[str] = None,
               at: Optional[float] = None) -> None:
    """Mark a schedule stale (or fresh again); the first marking keeps when (`at`, default now) and why."""
    if stale:
        conn.execute("UPDATE schedules SET stale = 1, stale_at = coalesce(stale_at, ?),"
                     " stale_reason = coalesce(stale_reason, ?) WHERE id = ?",
                     (time.time() if at is None else at, reason, schedule_id))
    else:
        conn.execute("UPDATE schedules SET stale = 0, stale_at = NULL, stale_reason = NULL WHERE id = ?",
                     (schedule_id,))


def stale_marks(conn: sqlite3.Connection, app: str) -> List[Tuple[float, str]]:
    """(when, why) each of the app's schedules went stale, oldest first."""
    return [(r["stale_at"], r["stale_reason"] or "stale") for r in check_all("schedules", conn.execute(
        "SELECT s.id, s.stale_at, s.stale_reason FROM schedules s JOIN apps a ON a.id = s.app_id"
        " WHERE a.name = ? AND s.stale_at IS NOT NULL ORDER BY s.stale_at", (app,)))]


def active_schedule_ids(conn: sqlite3.Connection) -> List[int]:
    return [r[0] for r in conn.execute("SELECT id FROM schedules WHERE active = 1 ORDER BY id")]


def newest_schedule_stale(conn: sqlite3.Connection, app: str) -> Optional[bool]:
    """None for an app not in the database; else whether its newest schedule is stale (False
    while it has none yet)."""
    rows = conn.execute("SELECT s.id, s.stale FROM apps a LEFT JOIN schedules s ON s.app_id = a.id"
                        " WHERE a.name = ? ORDER BY s.id DESC LIMIT 1", (app,)).fetchall()
    if not rows or rows[0]["id"] is None:
        return False if rows else None
    return bool(check("schedules", rows[0])["stale"])


def insert_relocation(conn: sqlite3.Connection, apps: Sequence[str], dev: int, region_sector: Optional[int],
                      region_bytes: int, moved_files: int, moved_bytes: int, report: dict) -> int:
    """Record one `warmstart relocate` that moved data; returns its id."""
    with transaction(conn):
        return conn.execute(
            "INSERT INTO relocations (created_at, apps_json, dev, region_sector, region_bytes, moved_files,"
            " moved_bytes, report_json) VALUES (?,?,?,?,?,?,?,?)",
            (time.time(), json.dumps(list(apps)), dev, region_sector, region_bytes, moved_files, moved_bytes,
             json.dumps(report, default=str))).lastrowid
