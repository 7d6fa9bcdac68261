"""All SQL for the launches table: one row per measured launch (run, bench, hook)."""

import json
import sqlite3
import time
from typing import List, Optional


def insert_launch(conn: sqlite3.Connection, *, mode: str, launch_time_s: float,
                  app_id: Optional[int] = None, schedule_id: Optional[int] = None,
                  mechanism: Optional[str] = None, disk: Optional[str] = None,
                  started_at: Optional[float] = None, exit_status: Optional[int] = None,
                  prefetched_bytes: Optional[int] = None, used_bytes: Optional[int] = None,
                  prefetched_used_bytes: Optional[int] = None, bench_id: Optional[str] = None,
                  details: Optional[dict] = None) -> int:
    """Store one launch; returns its id. details goes to details_json (replayer stats etc.)."""
    cur = conn.execute(
        "INSERT INTO launches (app_id, schedule_id, bench_id, mode, mechanism, disk, started_at,"
        " launch_time_s, exit_status, prefetched_bytes, used_bytes, prefetched_used_bytes, details_json)"
        " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (app_id, schedule_id, bench_id, mode, mechanism, disk, started_at or time.time(), launch_time_s,
         exit_status, prefetched_bytes, used_bytes, prefetched_used_bytes,
         json.dumps(details or {}, sort_keys=True, default=str)))
    return cur.lastrowid


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
    d = dict(row)
    d["details"] = json.loads(d.pop("details_json") or "{}")
    return d
