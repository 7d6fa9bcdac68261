"""Every value read from the database is checked where it is read (the readers in this package
call check() on each row): a file damaged, or edited by hand or by someone who could write it,
must not crash `hook refresh`, `analyze`, `export`, `report` or the learner with a traceback, nor
put a path like /tmp/../etc/shadow into an export or the hook index. What is refused is named in
one line: the table, the row (its key columns), the column, the value and the fix (BadRow).

One spec per table: each column's kind (integer in a range, finite real, text, canonical absolute
path, JSON of a given shape), NULL allowed or not. Columns a query adds (joins, aliases) are
checked when the table's spec names them, otherwise left to the reader.
"""

import json
import math
from typing import Any, Dict, Optional, Sequence

from ..errors import WarmstartError

I64 = (1 << 63) - 1
U32 = (1 << 32) - 1
BIG = 1 << 62          # sizes, offsets and lengths in bytes: far above any real file or disk
SECTORS = 1 << 53      # LBAs in 512-byte sectors
COUNT = 1 << 40        # pages or sectors in one run, ids and counts
REQUEST_SECTORS = 1 << 17   # one block request (64 MiB): the analyzer sets each of its sectors apart
ADD_PAGES = 1 << 18    # one page-cache add (1 GiB): the analyzer sets each of its pages apart
SECONDS = 1e10         # any time in seconds, a unix time or a duration (ns of it fit 64 bits)


class BadRow(WarmstartError):
    """A database value that cannot be what its column holds."""


class _Col:
    __slots__ = ("kind", "lo", "hi", "null")   # json: lo is the shape (list or dict)

    def __init__(self, kind: str, lo=None, hi=None, null: bool = False):
        self.kind, self.lo, self.hi, self.null = kind, lo, hi, null


def I(lo: int = 0, hi: int = I64, null: bool = False) -> _Col:       # noqa: E743 (a spec's shorthand)
    return _Col("int", lo, hi, null)


def R(lo: float = 0.0, null: bool = False) -> _Col:
    return _Col("real", lo, SECONDS, null)


def T(null: bool = False) -> _Col:
    return _Col("text", null=null)


def P(null: bool = False) -> _Col:
    return _Col("path", null=null)


def N(null: bool = False) -> _Col:
    """A file name: one path component (a BLOB, no "/", not "", "." or "..")."""
    return _Col("name", null=null)


def J(shape: type, null: bool = False) -> _Col:
    return _Col("json", shape, None, null)


ANY_NS = I(-I64)        # a time in ns relative to a launch's start (may be before it)
NS = I(0)               # a duration in ns
FLAG = I(0, 1)

SPECS: Dict[str, Dict[str, _Col]] = {
    "apps": {"id": I(1), "name": T(), "executable": P(), "argv_json": J(list), "exe_dev": I(null=True),
             "exe_ino": I(null=True), "exe_size": I(0, BIG, null=True), "exe_mtime_ns": I(-I64, null=True),
             "created_at": R()},
    "recordings": {"id": I(1), "app_id": I(1), "started_at": R(), "launch_time_s": R(), "end_reason": T(),
                   "exit_status": I(-I64, null=True), "backend": T(), "cold_method": T(), "lost_events": I(),
                   "status": T(), "cpu_total_s": R(null=True), "cpu_tail_ns": NS, "warm_cpu_s": R(null=True),
                   "env_json": J(dict), "superseded_by": I(1, null=True), "owner_uid": I(0, U32, null=True),
                   "app_name": T(), "n_requests": I(), "read_bytes": I(), "main_dev": I(null=True)},
    "recording_processes": {"recording_id": I(1), "pid": I(0, U32), "ppid": I(0, U32, null=True),
                            "comm": T(null=True), "exec_path": P(null=True), "start_ns": I(-I64, null=True),
                            "exit_ns": I(-I64, null=True), "oncpu_ns": NS},
    "block_requests": {"recording_id": I(1), "seq": I(), "dev": I(), "sector": I(0, SECTORS),
                       "nr_sectors": I(0, REQUEST_SECTORS), "rwbs": T(), "is_write": FLAG, "is_readahead": FLAG,
                       "is_meta": FLAG, "queue_ns": I(-I64, null=True), "issue_ns": ANY_NS,
                       "complete_ns": I(-I64, null=True), "pid": I(0, U32, null=True),
                       "tid": I(0, U32, null=True), "comm": T(null=True), "cpu_before_ns": NS,
                       "busy_after_ns": I(0, null=True), "busy_union_after_ns": I(0, null=True)},
    "page_cache_adds": {"recording_id": I(1), "seq": I(), "t_ns": ANY_NS, "dev": I(), "ino": I(),
                        "first_index": I(0, BIG >> 12), "nr_pages": I(0, ADD_PAGES)},
    "page_uses": {"recording_id": I(1), "dev": I(), "ino": I(), "first_index": I(0, BIG >> 12),
                  "nr_pages": I(0, COUNT)},
    "recording_lookups": {"recording_id": I(1), "seq": I(), "dev": I(), "dir_ino": I(), "name": N()},
    "recording_files": {"recording_id": I(1), "dev": I(), "ino": I(), "path": P(null=True),
                        "size": I(0, BIG, null=True), "mtime_ns": I(-I64, null=True),
                        "ctime_ns": I(-I64, null=True), "extents_json": J(list, null=True)},
    "device_profiles": {"id": I(1), "device": T(), "dev": I(), "size_bytes": I(0, BIG), "measured_at": R(),
                        "duration_s": R(), "profile_json": T()},
    "schedules": {"id": I(1), "app_id": I(1), "created_at": R(), "algorithm": T(), "probe": T(),
                  "profile_id": I(1, null=True), "recording_ids": J(list), "t_exp_s": R(), "total_bytes": I(0, BIG),
                  "waste_bytes": I(0, BIG), "stale": FLAG, "active": FLAG, "params_json": J(dict),
                  "stale_at": R(null=True), "stale_reason": T(null=True), "app_name": T()},
    "schedule_files": {"schedule_id": I(1), "file_no": I(0, U32), "path": P(), "dev": I(), "ino": I(),
                       "size": I(0, BIG), "mtime_ns": I(-I64), "ctime_ns": I(-I64)},
    "file_extents": {"schedule_id": I(1), "file_no": I(0, COUNT), "logical": I(0, BIG), "physical": I(0, BIG),
                     "length": I(0, BIG), "flags": I(0, U32)},
    "segments": {"schedule_id": I(1), "idx": I(1, U32), "first_p": I(0, U32), "last_p": I(0, U32),
                 "t_disk_s": R(), "cpu_s": R(), "bytes": I(0, BIG)},
    "schedule_ranges": {"schedule_id": I(1), "segment_idx": I(1, U32), "ord": I(0, COUNT), "dev": I(),
                        "sector": I(0, SECTORS), "nr_sectors": I(0, COUNT), "file_no": I(0, U32, null=True),
                        "file_offset": I(0, BIG, null=True), "length": I(0, BIG), "orig_pos": I(0, U32, null=True)},
    "launches": {"id": I(1), "app_id": I(1, null=True), "schedule_id": I(1, null=True), "bench_id": T(null=True),
                 "mode": T(), "mechanism": T(null=True), "disk": T(null=True), "started_at": R(),
                 "launch_time_s": R(null=True), "exit_status": I(-I64, null=True), "prefetched_bytes": I(0, BIG, null=True),
                 "used_bytes": I(0, BIG, null=True), "prefetched_used_bytes": I(0, BIG, null=True),
                 "details_json": J(dict),
                 # report_rows' columns of the launch's app and schedule
                 "app": T(), "algorithm": T(null=True), "t_exp_s": R(null=True),
                 "schedule_created_at": R(null=True), "schedule_stale": I(0, 1, null=True),
                 "schedule_stale_reason": T(null=True), "schedule_bytes": I(0, BIG, null=True)},
    "sorted_passes": {"id": I(1), "app_id": I(1), "recording_id": I(1, null=True), "bench_id": T(null=True),
                      "disk": T(null=True), "seconds": R(), "bytes": I(0, BIG), "ranges": I(0, COUNT),
                      "modelled": T(null=True), "measured_at": R(), "app": T(),
                      "schedule_id": I(1, null=True), "schedule_pass_s": R(null=True), "cut_bound_s": R(null=True)},
}

KEYS = {"block_requests": ("recording_id", "seq"), "page_cache_adds": ("recording_id", "seq"),
        "page_uses": ("recording_id", "dev", "ino", "first_index"), "recording_files": ("recording_id", "dev", "ino"),
        "recording_lookups": ("recording_id", "seq"), "recording_processes": ("recording_id", "pid"),
        "schedule_files": ("schedule_id", "file_no"),
        "file_extents": ("schedule_id", "file_no", "logical"), "segments": ("schedule_id", "idx"),
        "schedule_ranges": ("schedule_id", "segment_idx", "ord")}


def where(table: str, row) -> str:
    """The row, as the message names it: its key columns (id, or the table's composite key)."""
    keys = [k for k in KEYS.get(table, ("id",)) if k in row.keys()]
    if not keys:
        return f"table {table}"
    return f"table {table}, row " + ", ".join(f"{k} {_show(row[k])}" for k in keys)


def _show(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def bad(table: str, row, column: str, why: str) -> BadRow:
    return BadRow(f"database {where(table, row)}: {column} = {_show(row[column])} {why}; the database is "
                  f"damaged or was edited: remove that app (`warmstart forget APP`) and record it again, "
                  f"or restore the database from a backup")


def canonical_path(p: bytes) -> bool:
    """An absolute path with no empty, `.` or `..` component and no NUL: the file the recorder
    resolved, not a way around a check (/tmp/../etc/shadow)."""
    if not p.startswith(b"/") or b"\0" in p:
        return False
    return p == b"/" or all(c not in (b"", b".", b"..") for c in p[1:].split(b"/"))


def _why(col: _Col, v: Any) -> Optional[str]:
    if v is None:
        return None if col.null else "is NULL, which the column never holds"
    kind = col.kind
    if kind == "int":
        if type(v) is not int:
            return "is not an integer"
        if not col.lo <= v <= col.hi:
            return f"is outside {col.lo}..{col.hi}"
    elif kind == "real":
        if type(v) not in (int, float):
            return "is not a number"
        if not math.isfinite(v) or not col.lo <= v <= col.hi:
            return "is not a finite number" if not math.isfinite(v) else f"is outside {col.lo:g}..{col.hi:g}"
    elif kind == "text":
        if type(v) is not str:
            return "is not text"
    elif kind == "path":
        if type(v) is not bytes:
            return "is not a path (a BLOB)"
        if not canonical_path(v):
            return "is not a canonical absolute path"
    elif kind == "name":
        if type(v) is not bytes:
            return "is not a file name (a BLOB)"
        if v in (b"", b".", b"..") or b"/" in v or b"\0" in v:
            return "is not a file name"
    elif kind == "json":
        if type(v) is not str:
            return "is not JSON text"
        try:
            parsed = json.loads(v)
        except (ValueError, RecursionError):
            return "is not valid JSON"
        if type(parsed) is not col.lo:
            return f"is not a JSON {'list' if col.lo is list else 'object'}"
    return None


def check(table: str, row):
    """row itself, once each of its columns the table's spec names holds what it may; else BadRow."""
    spec = SPECS[table]
    for name in row.keys():
        col = spec.get(name)
        if col is not None:
            why = _why(col, row[name])
            if why:
                raise bad(table, row, name, why)
    return row


def check_all(table: str, rows) -> list:
    return [check(table, r) for r in rows]


def json_list_of(table: str, row, column: str, types: Sequence[type]) -> list:
    """The column's JSON list (checked by check()), each item of one of `types`."""
    value = json.loads(row[column])
    if any(type(x) not in types for x in value):
        raise bad(table, row, column, "holds an item of the wrong type")
    return value


def extents_of(table: str, row, column: str = "extents_json") -> Optional[list]:
    """[[logical, physical, length, flags], ...] of a recorded file, each a non-negative integer."""
    if row[column] is None:
        return None
    value = json.loads(row[column])
    for e in value:
        if type(e) is not list or len(e) != 4 or any(type(x) is not int or not 0 <= x <= BIG for x in e):
            raise bad(table, row, column, "holds an extent that is not 4 non-negative integers")
    return value
