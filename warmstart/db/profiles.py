"""All SQL for device_profiles: store a measured DiskProfile, find the newest one for a device."""

import math
import sqlite3
import time
from typing import Dict, Optional, Tuple

from ..model import DiskProfile
from .rows import bad, check


def save_profile(conn: sqlite3.Connection, device: str, dev: int, profile: DiskProfile, duration_s: float) -> int:
    cur = conn.execute(
        "INSERT INTO device_profiles (device, dev, size_bytes, measured_at, duration_s, profile_json)"
        " VALUES (?,?,?,?,?,?)", (device, dev, profile.size_bytes, time.time(), duration_s, profile.to_json()))
    return cur.lastrowid


def latest_profile(conn: sqlite3.Connection, dev: int, size_bytes: Optional[int] = None) -> Optional[Tuple[int, DiskProfile]]:
    """(id, profile) of the newest profile of dev (and of that size, since loop numbers get reused)."""
    sql = "SELECT id, dev, profile_json FROM device_profiles WHERE dev = ?"
    args = [dev]
    if size_bytes is not None:
        sql += " AND size_bytes = ?"
        args.append(size_bytes)
    row = conn.execute(sql + " ORDER BY id DESC LIMIT 1", args).fetchone()
    if row is None:
        return None
    check("device_profiles", row)
    try:
        p = DiskProfile.from_json(row["profile_json"])
    except (ValueError, TypeError, KeyError, AttributeError, IndexError, RecursionError) as e:
        raise bad("device_profiles", row, "profile_json", f"is not a disk profile ({type(e).__name__})")
    numbers = [p.overhead_s, p.stream_bytes, p.c_switch_s, p.r_tr_Bps, p.size_bytes, p.strip_bytes, p.stripe_disks]
    curves = [x for curve in (p.seek_curve, p.rate_curve) for pair in curve for x in pair]
    if not p.seek_curve or not p.rate_curve or any(len(pair) != 2 for pair in p.seek_curve + p.rate_curve) \
            or not all(_number(x) for x in numbers + curves) or p.r_tr_Bps <= 0 or not isinstance(p.extra, dict):
        raise bad("device_profiles", row, "profile_json", "holds a value a disk profile cannot have")
    return row["id"], p


def _number(x) -> bool:
    return type(x) in (int, float) and math.isfinite(x) and x >= 0


def main_device(conn: sqlite3.Connection, sectors_by_dev: Dict[int, int]) -> int:
    """The device a launch is timed on, given the sectors it read from each: the most-read one
    among those with a stored profile, else the most-read one (a chrooted launch also reads the
    host's root disk a little, and other I/O can land in a recording on a busy machine)."""
    profiled = [d for d in sectors_by_dev if latest_profile(conn, d)]
    return max(profiled or sectors_by_dev, key=sectors_by_dev.get)


def profile_by_id(conn: sqlite3.Connection, profile_id: int) -> Optional[DiskProfile]:
    """The stored profile profile_id (the one a schedule was modelled with), or None."""
    row = conn.execute("SELECT profile_json FROM device_profiles WHERE id = ?", (profile_id,)).fetchone()
    return None if row is None else DiskProfile.from_json(row["profile_json"])
