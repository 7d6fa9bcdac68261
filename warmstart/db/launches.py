"""All SQL for the launches table: one row per measured launch (run, bench, hook); and for the
sorted passes, the disk half of a launch's lower bound."""

import json
import sqlite3
import time
from typing import List, Optional, Sequence, Tuple

from .rows import check, check_all


def insert_launch(conn: sqlite3.Connection, *, mode: str, launch_time_s: Optional[float],
                  app_id: Optional[int] = None, schedule_id: Optional[int] = None,
                  mechanism: Optional[str] = None, disk: Optional[str] = None,
                  started_at: Optional[float] = None, exit_status: Optional[int] = None,
                  prefetched_bytes: Optional[int] = None, used_bytes: Optional[int] = None,
                  prefetched_used_bytes: Optional[int] = None, bench_id: Optional[str] = None,
                  details: Optional[dict] = None) -> int:
    """Store one launch; returns its id. details goes to details_json (replayer stats etc.).
    launch_time_s None: the launch has no exact time; details["not_timed"] must say why (never
    a placeholder number: it would enter medians and gains)."""
    if launch_time_s is None and not (details or {}).get("not_timed"):
        raise ValueError("a launch stored without a time needs details['not_timed'] (the reason)")
    if launch_time_s is not None and not launch_time_s >= 0:
        raise ValueError(f"launch time {launch_time_s!r} is not a time: store None with the reason")
    cur = conn.execute(
        "INSERT INTO launches (app_id, schedule_id, bench_id, mode, mechanism, disk, started_at,"
        " launch_time_s, exit_status, prefetched_bytes, used_bytes, prefetched_used_bytes, details_json)"
        " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (app_id, schedule_id, bench_id, mode, mechanism, disk, started_at or time.time(), launch_time_s,
         exit_status, prefetched_bytes, used_bytes, prefetched_used_bytes,
         json.dumps(details or {}, sort_keys=True, default=str)))
    return cur.lastrowid


def insert_sorted_pass(conn: sqlite3.Connection, *, app_id: int, seconds: float, nbytes: int, ranges: int,
                       disk: Optional[str] = None, recording_id: Optional[int] = None,
                       bench_id: Optional[str] = None, modelled: Optional[str] = None,
                       schedule_id: Optional[int] = None, schedule_pass_s: Optional[float] = None,
                       cut_bound_s: Optional[float] = None) -> int:
    """seconds: the recording's raw sorted pass; schedule_pass_s and cut_bound_s: the lower
    bound's parts (analyzer/bound.py) for the schedule schedule_id."""
    cur = conn.execute(
        "INSERT INTO sorted_passes (app_id, recording_id, bench_id, disk, seconds, bytes, ranges, modelled,"
        " measured_at, schedule_id, schedule_pass_s, cut_bound_s) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
        (app_id, recording_id, bench_id, disk, seconds, nbytes, ranges, modelled, time.time(),
         schedule_id, schedule_pass_s, cut_bound_s))
    return cur.lastrowid


def latest_sorted_passes(conn: sqlite3.Connection) -> dict:
    """(app name, disk, bench id) -> the latest sorted pass of that app on that disk in that bench
    run (bench id None: measured outside one), as a dict; `cut_fetch_s`, the fetch half of its
    schedule's cut bound (None if unknown)."""
    rows = conn.execute(
        "SELECT a.name AS app, p.*, json_extract(s.params_json, '$.bound.fetch_s') AS cut_fetch_s"
        " FROM sorted_passes p JOIN apps a ON a.id = p.app_id LEFT JOIN schedules s ON s.id = p.schedule_id"
        " ORDER BY p.measured_at, p.id").fetchall()
    out = {}
    for r in check_all("sorted_passes", rows):
        d = dict(r)
        if not (type(d["cut_fetch_s"]) in (int, float) and d["cut_fetch_s"] >= 0):
            d["cut_fetch_s"] = None
        out[(r["app"], r["disk"], r["bench_id"])] = d
    return out


def apps_with_hook_launches(conn: sqlite3.Connection) -> List[tuple]:
    """(app id, name) of every app with hooked launches."""
    return [tuple(r) for r in conn.execute(
        "SELECT DISTINCT a.id, a.name FROM launches l JOIN apps a ON a.id = l.app_id WHERE l.mode = 'hook'"
        " ORDER BY a.name")]


def recent_hook_intervals(conn: sqlite3.Connection, limit: int = 200) -> List[tuple]:
    """(exec, end) of the latest stored hooked launches of any app, on the daemon's
    CLOCK_MONOTONIC: end is the exit, or when the replayer stopped waiting for it (an app
    running longer is past its launch by then); launches without either are left out."""
    rows = conn.execute(
        "SELECT json_extract(details_json, '$.hook_event.t_exec'), json_extract(details_json, '$.replay.exit.t_measured')"
        " FROM launches WHERE mode = 'hook' ORDER BY id DESC LIMIT ?", (limit,)).fetchall()
    return [(r[0], r[1]) for r in rows if r[0] is not None and r[1] is not None]


def latest_hook_schedule(conn: sqlite3.Connection, app_id: int) -> Optional[int]:
    """The schedule of the app's latest hooked launch."""
    row = conn.execute("SELECT schedule_id FROM launches WHERE app_id = ? AND mode = 'hook'"
                       " ORDER BY id DESC LIMIT 1", (app_id,)).fetchone()
    return row[0] if row else None


def last_cold_launches(conn: sqlite3.Connection, app_id: int, limit: int = 5) -> List[Tuple[float, Optional[float]]]:
    """(exact time, the app's CPU time or None) of the app's latest plain cold launches (mode
    "cold": caches dropped, not prefetched: `warmstart run --cold`, bench) that succeeded,
    oldest first."""
    rows = conn.execute("SELECT launch_time_s, json_extract(details_json, '$.app_cpu_s') FROM launches"
                        " WHERE app_id = ? AND mode = 'cold'"
                        " AND launch_time_s IS NOT NULL AND coalesce(exit_status, 0) = 0"
                        " ORDER BY started_at DESC, id DESC LIMIT ?", (app_id, limit)).fetchall()
    return [(r[0], r[1]) for r in reversed(rows)]


def last_launch_id(conn: sqlite3.Connection) -> int:
    return conn.execute("SELECT coalesce(max(id), 0) FROM launches").fetchone()[0]


def last_bench_launch_id(conn: sqlite3.Connection, bench_id: str) -> int:
    """The newest launch stored under the bench run, 0 if none."""
    return conn.execute("SELECT COALESCE(MAX(id), 0) FROM launches WHERE bench_id = ?", (bench_id,)).fetchone()[0]


def bench_launches_with_mode_prefix(conn: sqlite3.Connection, bench_id: str, prefix: str) -> List[tuple]:
    """(app name, mode, launch_time_s, exit_status, details) of the bench run's launches whose mode
    starts with prefix (a LIKE pattern: no % or _ in it)."""
    return [(r["app"], r["mode"], r["launch_time_s"], r["exit_status"], json.loads(r["details_json"]))
            for r in check_all("launches", conn.execute(
                "SELECT l.id, a.name AS app, l.mode, l.launch_time_s, l.exit_status, l.details_json FROM launches l"
                " JOIN apps a ON a.id = l.app_id WHERE l.bench_id = ? AND l.mode LIKE ?", (bench_id, prefix + "%")))]


def set_launch_timeline(conn: sqlite3.Connection, launch_id: int, timeline: dict) -> None:
    """Add a stored launch's sampled timeline (bench's repetition 1, for the report's figure) to its details."""
    conn.execute("UPDATE launches SET details_json = json_set(details_json, '$.timeline', json(?)) WHERE id = ?",
                 (json.dumps(timeline), launch_id))


def set_launch_disk_stats(conn: sqlite3.Connection, launch_id: int, disk_stats: Optional[dict],
                          mode: Optional[str] = None) -> None:
    """Add the emulated disk's counts over a stored launch to its details (null if not counted);
    with mode, store the launch under that mode instead."""
    conn.execute("UPDATE launches SET mode = COALESCE(?, mode), details_json = json_set(details_json,"
                 " '$.disk_stats', json(?)) WHERE id = ?", (mode, json.dumps(disk_stats), launch_id))


def unclaimed_hook_launch(conn: sqlite3.Connection, app_id: int, after_id: int) -> Optional[dict]:
    """The first hooked launch of the app stored after `after_id` by the learner (no bench run yet)."""
    row = conn.execute("SELECT * FROM launches WHERE app_id = ? AND mode = 'hook' AND bench_id IS NULL AND id > ?"
                       " ORDER BY id LIMIT 1", (app_id, after_id)).fetchone()
    return _as_dict(row) if row else None


def claim_launch(conn: sqlite3.Connection, launch_id: int, *, bench_id: str, disk: str, launch_time_s: float,
                 exit_status: Optional[int], extra: dict) -> None:
    """Make a launch the learner stored part of a bench run, timed as the bench times launches."""
    details = json.loads(check("launches", conn.execute("SELECT id, details_json FROM launches WHERE id = ?",
                                                         (launch_id,)).fetchone())["details_json"])
    details["bench"] = extra
    conn.execute("UPDATE launches SET bench_id = ?, disk = ?, launch_time_s = ?, exit_status = ?, details_json = ?"
                 " WHERE id = ?", (bench_id, disk, launch_time_s, exit_status,
                                   json.dumps(details, sort_keys=True, default=str), launch_id))


def get_launch(conn: sqlite3.Connection, launch_id: int) -> Optional[dict]:
    row = conn.execute("SELECT * FROM launches WHERE id = ?", (launch_id,)).fetchone()
    return _as_dict(row) if row else None


def list_launches(conn: sqlite3.Connection, app_id: Optional[int] = None, mode: Optional[str] = None,
                  bench_id: Optional[str] = None) -> List[dict]:
    """Launches, oldest first, filtered by any of app, mode, bench run."""
    where, args = [], []
    for col, val in (("app_id", app_id), ("mode", mode), ("bench_id", bench_id)):
        if val is not None:
            where.append(f"{col} = ?")
            args.append(val)
    sql = "SELECT * FROM launches" + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY id"
    return [_as_dict(r) for r in conn.execute(sql, args)]


def _as_dict(row) -> dict:
    d = dict(check("launches", row))
    d["details"] = json.loads(d.pop("details_json") or "{}")
    return d


def report_rows(conn: sqlite3.Connection, names: Sequence[str] = (), bench_id: Optional[str] = None,
                disk: Optional[str] = None) -> List[sqlite3.Row]:
    """Launches with their app's name and their schedule's facts, filtered, per app in time order."""
    where, args = ["1"], []
    if names:
        where.append(f"a.name IN ({','.join('?' * len(names))})")
        args += list(names)
    if bench_id:
        where.append("l.bench_id = ?")
        args.append(bench_id)
    if disk:
        where.append("l.disk = ?")
        args.append(disk)
    return check_all("launches", conn.execute(f"""
        SELECT l.*, a.name AS app, s.algorithm, s.t_exp_s, s.created_at AS schedule_created_at,
               s.stale AS schedule_stale, s.stale_reason AS schedule_stale_reason, s.total_bytes AS schedule_bytes
        FROM launches l JOIN apps a ON a.id = l.app_id
        LEFT JOIN schedules s ON s.id = l.schedule_id
        WHERE {' AND '.join(where)}
        ORDER BY a.name, l.started_at, l.id""", args))


def hook_launches_mentioning(conn: sqlite3.Connection, schedule_id: int, text: str) -> List[dict]:
    """The schedule's hooked launches whose details contain `text` (as dicts, details parsed)."""
    return [_as_dict(r) for r in conn.execute(
        "SELECT * FROM launches WHERE mode = 'hook' AND schedule_id = ? AND instr(details_json, ?) > 0",
        (schedule_id, text))]


def latest_bench_id(conn: sqlite3.Connection) -> Optional[str]:
    row = conn.execute("SELECT bench_id FROM launches WHERE bench_id IS NOT NULL "
                       "ORDER BY started_at DESC, id DESC LIMIT 1").fetchone()
    return row[0] if row else None
