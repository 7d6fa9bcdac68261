"""Fold warmstartd's records (JSON lines: launches, stale schedules) back into the database.

The daemon never opens SQLite; `warmstart hook status` (and install) call sync() to mark the
schedules it found stale (their files changed, e.g. a package upgrade), so `run` and the next
index skip them until the app is re-learned.
"""

import json
import os
import time
import uuid
from collections import Counter
from typing import Dict

from ..db.connection import database_file
from ..db.schedules import mark_stale
from ..paths import replace_file
from .layout import HookPaths


def read_offset(path, paths: HookPaths) -> int:
    """A reader's offset in the log; without a readable one, the current generation's start
    (never the log's: what comes before it belongs to an earlier install, maybe of another
    database)."""
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return generation_start(paths)


def generation_start(paths: HookPaths) -> int:
    """Where the current install's records begin in the daemon's log (0 before any install)."""
    return generation(paths).get("events_offset", 0)


def write_offset(path, offset: int) -> None:
    replace_file(path, str(offset).encode())


def read_new(paths: HookPaths):
    """Records appended since the last sync, and the new offset."""
    offset = read_offset(paths.events_offset, paths)
    try:
        with open(paths.events, "rb") as f:
            f.seek(0, 2)
            if f.tell() < offset:
                offset = 0  # the log was truncated or replaced
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return [], offset
    end = data.rfind(b"\n") + 1  # a half-written last line waits for the next sync
    records = []
    for line in data[:end].splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    return records, offset + end


def sync(conn, paths: HookPaths) -> Dict[str, int]:
    """Mark the schedules the daemon found stale since the last sync. Only into the database of
    the current install (its generation): the records name schedule ids of that database, which
    in another one name other schedules (`hook install` of another database calls this first)."""
    gen = generation(paths)
    db_file = database_file(conn)
    if gen.get("db") and os.path.realpath(db_file) != gen["db"]:
        return {"records": 0, "stale_marked": 0, "other_database": gen["db"]}
    records, offset = read_new(paths)
    stale = {}
    for r in records:
        if r.get("event") == "stale":
            stale.setdefault(r["schedule_id"], r)
    for sid, r in stale.items():
        # the daemon's clock is CLOCK_MONOTONIC
        at = time.time() - max(0.0, time.monotonic() - r["t"]) if isinstance(r.get("t"), (int, float)) else None
        what = {"missing": "is missing"}.get(r.get("reason"), r.get("reason") or "changed")
        mark_stale(conn, sid, reason=f"a scheduled file {what} (warmstartd)", at=at)
    outcomes = Counter(r.get("outcome") for r in records if r.get("event") == "launch")
    if records:
        write_offset(paths.events_offset, offset)
    return {"records": len(records), "stale_marked": len(stale), **{f"launches_{k}": v for k, v in outcomes.items()}}


def generation(paths: HookPaths) -> dict:
    """The current install's generation: {"id", "db", "events_offset"} ({} before any install)."""
    try:
        return json.loads(paths.generation.read_text())
    except (OSError, ValueError):
        return {}


def start_generation(paths: HookPaths, db_path: str) -> dict:
    """A new install: every record the daemon wrote before this point belongs to an earlier
    install (maybe of another database, whose schedule ids collide with this one's) and is
    never folded in or judged. The daemon may be running and appending, so the log is not
    moved: both readers start past its current end, and old launch reports are removed."""
    try:
        offset = paths.events.stat().st_size
    except FileNotFoundError:
        offset = 0
    gen = {"id": uuid.uuid4().hex, "db": os.path.realpath(db_path), "events_offset": offset,
           "started_at": time.time()}
    paths.state.mkdir(parents=True, exist_ok=True)
    for f in (paths.events_offset, paths.feedback_offset):
        write_offset(f, offset)
    if paths.launches.is_dir():
        for f in paths.launches.iterdir():
            f.unlink(missing_ok=True)
    replace_file(paths.generation, json.dumps(gen).encode(), 0o644)
    return gen


def summary(paths: HookPaths, last: int = 2000) -> dict:
    """Counts over the last `last` launch records of this install, for `status`."""
    try:
        with open(paths.events, "rb") as f:
            f.seek(generation_start(paths))
            lines = f.read().splitlines()[-last:]
    except FileNotFoundError:
        return {}
    launches = []
    for line in lines:
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if r.get("event") == "launch":
            launches.append(r)
    held = sorted(r["held_ms"] for r in launches if "held_ms" in r)
    return {"launches": len(launches), "outcomes": dict(Counter(r.get("outcome") for r in launches)),
            "median_held_ms": held[len(held) // 2] if held else None}
