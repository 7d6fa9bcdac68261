"""What the system hook does for each user, kept for that user alone.

The learner (root) appends one line per judged hooked launch to `users/<uid>.jsonl` in the hook's
state directory: the app's name, when, the exec-to-exit time, the hook's outcome and hold, the
app's recorded cold launch time and the launch's row id (so a restarted learner adds it once).
No command lines and no file names. The file belongs to the
user (mode 0600) in a directory only root writes, so the user and root read it, nobody else; the
system database and logs stay root's (docs/security.md). `warmstart hook status` and `warmstart
report`, run by that user, show it: which of their apps the system hook prefetches, and the gain.
"""

import json
import os
import stat
import statistics
import time
from typing import List, Optional

from ..db import launches as launches_db
from ..db.recordings import cold_recordings, get_app_by_id
from ..errors import WarmstartError
from ..paths import PRIVATE_MODE, replace_file
from .index import read_index
from .layout import HookPaths

MAX_LINES = 2000   # per user: the view keeps the recent launches, not a history of years
MAX_BYTES = MAX_LINES * 400   # past this size the view is trimmed to its last MAX_BYTES / 2

# The file is the user's: root reads it only bounded (at most MAX_BYTES, from its end, with one
# pread), never through a symlink, only a regular file, and rewrites only the complete lines it
# keeps: a huge or sparse file (a hole reads as zeros) costs the learner neither memory nor disk.


def _file(paths: HookPaths, uid: int):
    return paths.users / f"{int(uid)}.jsonl"


def _tail(fd: int, size: int, limit: int) -> bytes:
    """The complete view lines among the file's last `limit` bytes (a line cut by the start of
    the window, and anything not a line of ours, such as a hole's zeros, is left out)."""
    start = max(0, size - limit)
    raw = os.pread(fd, min(size, limit), start)
    if start:
        raw = raw[raw.find(b"\n") + 1:] if b"\n" in raw else b""
    return b"".join(line for line in raw.splitlines(keepends=True)
                    if line.startswith(b"{") and line.endswith(b"}\n"))


def record_launch(conn, paths: HookPaths, event: dict, launch_id: int, once: bool = False) -> None:
    """Append the launch the learner just stored (launches row launch_id) to its user's view.
    once: unless the view has it already (a learner killed between the row and its line, or
    after both, does it again when it starts again)."""
    uid = event.get("uid")
    row = launches_db.get_launch(conn, launch_id)
    if uid is None or row is None or row.get("app_id") is None:
        return
    app = get_app_by_id(conn, row["app_id"])
    cold = [r["launch_time_s"] for r in cold_recordings(conn, [app["name"]]) if r["launch_time_s"]]
    line = {"t": row["started_at"] or time.time(), "app": app["name"], "launch_s": row["launch_time_s"],
            "outcome": event.get("outcome"), "held_ms": event.get("held_ms"),
            "cold_s": statistics.median(cold) if cold else None, "launch_id": launch_id}
    if row["launch_time_s"] is None:   # no exact time: said so, never a number
        line["not_timed"] = row["details"].get("not_timed") or "no exact time"
    data = (json.dumps(line, sort_keys=True) + "\n").encode()
    paths.users.mkdir(mode=0o755, exist_ok=True)
    path = _file(paths, uid)
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                 PRIVATE_MODE)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return
        if st.st_uid != uid or st.st_mode & 0o077:
            os.fchown(fd, uid, -1)
            os.fchmod(fd, PRIVATE_MODE)
        if once and f'"launch_id": {int(launch_id)},'.encode() in _tail(fd, st.st_size, MAX_BYTES):
            return
        if st.st_size > MAX_BYTES:   # keep the newer lines, replaced at once (never half-trimmed)
            replace_file(path, _tail(fd, st.st_size, MAX_BYTES // 2) + data, PRIVATE_MODE, owner=uid)
            return
        os.write(fd, data)
    finally:
        os.close(fd)


def view(paths: HookPaths, uid: Optional[int] = None) -> dict:
    """For one user (default: the caller): the apps the system hook prefetches (its index is
    public: the shim reads it) and, per app they launched, launches, median time, recorded cold
    time and gain."""
    uid = os.getuid() if uid is None else uid
    out = {"index": None, "apps": []}
    try:
        out["index"] = sorted({e.name for e in read_index(os.fsencode(paths.index)).entries})
    except (OSError, WarmstartError):   # no system hook, or an index we cannot trust
        out["index"] = None
    rows: List[dict] = []
    try:
        fd = os.open(_file(paths, uid), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        fd = None
    if fd is not None:
        try:
            st = os.fstat(fd)
            text = _tail(fd, st.st_size, MAX_BYTES) if stat.S_ISREG(st.st_mode) else b""
        finally:
            os.close(fd)
        for line in text.splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:
                continue
    for app in sorted({r.get("app") for r in rows if isinstance(r.get("app"), str)}):
        mine = [r for r in rows if r.get("app") == app]
        timed = [t for t in map(timed_s, mine) if t is not None]
        med = statistics.median(timed) if timed else None
        cold = mine[-1].get("cold_s")
        out["apps"].append({"app": app, "launches": len(mine), "timed": len(timed),
                            "not_timed": len(mine) - len(timed), "median_s": med, "cold_s": cold,
                            "gain": (1 - med / cold) if cold and med is not None else None,
                            "last": mine[-1].get("outcome"), "last_at": mine[-1].get("t"),
                            "last_not_timed": None if timed_s(mine[-1]) is not None
                            else mine[-1].get("not_timed") or "no exact time"})
    return out


def timed_s(line: dict) -> Optional[float]:
    """A view line's exact launch time, or None: not timed (stored as null; lines written before
    that may hold a -1 placeholder, which is no time either)."""
    t = line.get("launch_s")
    return float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) and t > 0 else None


def render(v: dict) -> str:
    """The view as text for `hook status` and `report`."""
    if v["index"] is None and not v["apps"]:
        return "system hook: none installed (or not readable here)"
    lines = [f"system hook: prefetches {len(v['index'] or [])} app(s)"
             + (f": {', '.join(v['index'][:8])}{' ...' if len(v['index']) > 8 else ''}" if v["index"] else "")]
    if v["apps"]:
        lines.append("your hooked launches:  app  launches  median s  cold s  gain  last")
        for a in v["apps"]:
            cold = f"{a['cold_s']:.3f}" if a["cold_s"] else "-"
            gain = f"{100 * a['gain']:.0f}%" if a["gain"] is not None else "-"
            med = f"{a['median_s']:.3f}" if a["median_s"] is not None else "not timed"
            lines.append(f"  {a['app']}  {a['launches']}  {med}  {cold}  {gain}  {a['last']}"
                         + (f" ({a['not_timed']} not timed)" if a["not_timed"] else ""))
        for a in v["apps"]:
            if a["not_timed"]:
                lines.append(f"  not timed: {a['app']}: {a['not_timed']} of {a['launches']} launch(es) have no "
                             f"exact time, left out of the median and gain"
                             + (f"; the last: {a['last_not_timed']}" if a["last_not_timed"] else ""))
    else:
        lines.append("your hooked launches: none yet")
    return "\n".join(lines)
