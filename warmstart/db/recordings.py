"""All SQL for the apps and recordings tables (recorder writes, analyzer and reports read).

A recording is stored in one transaction with its requests, page-cache adds, processes and
files, so a crash or error leaves either the whole recording or nothing.
"""

import json
import os
import sqlite3
import time
from typing import Dict, List, Optional, Sequence, Tuple

from ..errors import WarmstartError
from ..signature import signature_argv
from ..model import BlockRequest, Extent, FileInfo, PageAdd, Process, Recording, UsedRun
from .connection import transaction
from .rows import check, check_all, extents_of, json_list_of


def _argv_json(executable: bytes, argv: Sequence) -> str:
    """The command line as stored: its signature only (signature.py), never the other arguments.
    Non-UTF-8 arguments survive as surrogateescape'd str (os.fsencode gives the bytes back)."""
    return json.dumps([os.fsdecode(a) for a in signature_argv(executable, argv)])


def argv_of(app_row) -> List[bytes]:
    return [os.fsencode(a) for a in json_list_of("apps", check("apps", app_row), "argv_json", (str,))]


# ---- apps -------------------------------------------------------------------------------

def get_app(conn: sqlite3.Connection, name: str) -> Optional[sqlite3.Row]:
    row = conn.execute("SELECT * FROM apps WHERE name = ?", (name,)).fetchone()
    return None if row is None else check("apps", row)


def get_app_by_id(conn: sqlite3.Connection, app_id: int) -> Optional[sqlite3.Row]:
    row = conn.execute("SELECT * FROM apps WHERE id = ?", (app_id,)).fetchone()
    return None if row is None else check("apps", row)


def find_app_by_signature(conn: sqlite3.Connection, executable: bytes, signature: Sequence[bytes]):
    """The first app recorded with this executable and command-line signature (as dict), or None."""
    want = [os.fsencode(a) for a in signature[1:]]
    for row in conn.execute("SELECT * FROM apps WHERE executable = ? ORDER BY id", (executable,)):
        if argv_of(row)[1:] == want:
            return dict(row)
    return None


def list_apps(conn: sqlite3.Connection) -> List[sqlite3.Row]:
    return check_all("apps", conn.execute("SELECT * FROM apps ORDER BY name"))


def upsert_app(conn: sqlite3.Connection, name: str, executable: bytes, argv: Sequence) -> int:
    """Create the app or refresh its command signature and executable identity; returns its id.
    Call inside a transaction (insert_recording does)."""
    try:
        st = os.stat(executable)
        ident = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    except OSError:
        ident = (None, None, None, None)
    row = get_app(conn, name)
    if row is None:
        cur = conn.execute(
            "INSERT INTO apps (name, executable, argv_json, exe_dev, exe_ino, exe_size, exe_mtime_ns, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (name, executable, _argv_json(executable, argv), *ident, time.time()))
        return cur.lastrowid
    conn.execute("UPDATE apps SET executable = ?, argv_json = ?, exe_dev = ?, exe_ino = ?, exe_size = ?,"
                 " exe_mtime_ns = ? WHERE id = ?", (executable, _argv_json(executable, argv), *ident, row["id"]))
    return row["id"]


# ---- recordings -------------------------------------------------------------------------

def insert_recording(conn: sqlite3.Connection, app_name: str, executable: bytes, argv: Sequence,
                     rec: Recording, owner_uid: Optional[int] = None) -> int:
    """Store the app (created if new) and one recording atomically; returns the recording id.
    owner_uid: whose launch it is (the learner's recording of a user's launch); default the
    recording process's user (0 for root's: usable by every user's launch)."""
    owner_uid = os.getuid() if owner_uid is None else int(owner_uid)
    try:
        with transaction(conn):
            app_id = upsert_app(conn, app_name, executable, argv)
            cur = conn.execute(
                "INSERT INTO recordings (app_id, started_at, launch_time_s, end_reason, exit_status, backend,"
                " cold_method, lost_events, status, cpu_total_s, cpu_tail_ns, warm_cpu_s, env_json, owner_uid)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (app_id, rec.started_at, rec.launch_time_s, rec.end_reason, rec.exit_status, rec.backend,
                 rec.cold_method, rec.lost_events, rec.status, rec.cpu_total_s, rec.cpu_tail_ns, rec.warm_cpu_s,
                 json.dumps(rec.env, sort_keys=True, default=str), owner_uid))
            rid = cur.lastrowid
            conn.executemany(
                "INSERT INTO block_requests (recording_id, seq, dev, sector, nr_sectors, rwbs, is_write,"
                " is_readahead, is_meta, queue_ns, issue_ns, complete_ns, pid, tid, comm, cpu_before_ns,"
                " busy_after_ns, busy_union_after_ns) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(rid, i, r.dev, r.sector, r.nr_sectors, r.rwbs, int(r.is_write), int(r.is_readahead),
                  int(r.is_meta), r.queue_ns, r.issue_ns, r.complete_ns, r.pid, r.tid, r.comm, r.cpu_before_ns,
                  r.busy_after_ns, r.busy_union_after_ns)
                 for i, r in enumerate(rec.requests, start=1)])
            conn.executemany(
                "INSERT INTO page_cache_adds (recording_id, seq, t_ns, dev, ino, first_index, nr_pages)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(rid, i, a.t_ns, a.dev, a.ino, a.first_index, a.nr_pages)
                 for i, a in enumerate(rec.page_adds, start=1)])
            conn.executemany(
                "INSERT INTO page_uses (recording_id, dev, ino, first_index, nr_pages) VALUES (?, ?, ?, ?, ?)",
                [(rid, u.dev, u.ino, u.first_index, u.nr_pages) for u in rec.page_uses or ()])
            conn.executemany(
                "INSERT INTO recording_processes (recording_id, pid, ppid, comm, exec_path, start_ns, exit_ns, oncpu_ns)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [(rid, p.pid, p.ppid, p.comm, p.exec_path, p.start_ns, p.exit_ns, p.oncpu_ns)
                 for p in rec.processes])
            conn.executemany(
                "INSERT INTO recording_files (recording_id, dev, ino, path, size, mtime_ns, ctime_ns, extents_json)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [(rid, f.dev, f.ino, f.path, f.size, f.mtime_ns, f.ctime_ns,
                  None if f.extents is None else
                  json.dumps([[e.logical, e.physical, e.length, e.flags] for e in f.extents])) for f in rec.files])
            conn.executemany(
                "INSERT INTO recording_lookups (recording_id, seq, dev, dir_ino, name) VALUES (?, ?, ?, ?, ?)",
                [(rid, i, d, ino, name) for i, (d, ino, name) in enumerate(rec.lookups, start=1)])
            supersede_older(conn, app_id, rid)
    except sqlite3.OperationalError as e:
        if "full" in str(e).lower():
            raise WarmstartError("database disk is full; nothing was stored: free space or pass --db PATH elsewhere")
        raise WarmstartError(f"cannot store the recording ({e}); nothing was stored")
    return rid


def supersede_older(conn: sqlite3.Connection, app_id: int, rid: int) -> List[int]:
    """Mark the app's older current recordings superseded by the new one `rid` when it was made
    because the app changed: its active schedule is stale (re-learned after feedback or a changed
    file), or a program file both read (an executable the launch ran, a shared object) has
    another identity now: an upgrade, whose old blocks are gone, and a majority vote of old
    recordings would outvote the new ones; or the new one read from a device the old one never
    read (_read_elsewhere). Data files are not compared: apps rewrite their own caches between
    launches. Recordings of an unchanged app stay current and are merged by vote."""
    stale = conn.execute("SELECT 1 FROM schedules WHERE app_id = ? AND active = 1 AND stale = 1",
                         (app_id,)).fetchone() is not None
    older = [r[0] for r in conn.execute("SELECT id FROM recordings WHERE app_id = ? AND id != ? AND "
                                        "superseded_by IS NULL", (app_id, rid))]
    if not stale:
        main = _main_device(conn, rid)
        older = [o for o in older if _programs_changed(conn, o, rid) or _read_elsewhere(conn, o, main)]
    conn.executemany("UPDATE recordings SET superseded_by = ? WHERE id = ?", [(rid, o) for o in older])
    return older


def _main_device(conn: sqlite3.Connection, rid: int) -> Optional[int]:
    """The block device most of the recording's read sectors came from (ties: the lower number);
    None for a recording with no reads."""
    row = conn.execute("SELECT dev FROM block_requests WHERE recording_id = ? AND is_write = 0 GROUP BY dev"
                       " ORDER BY SUM(nr_sectors) DESC, dev LIMIT 1", (rid,)).fetchone()
    return None if row is None else row[0]


def _read_elsewhere(conn: sqlite3.Connection, old: int, main: Optional[int]) -> bool:
    """Did the new recording read mostly from a block device (`main`, _main_device) the old one
    never read: the app's disk has another device number now (renumbered at boot, or the same
    image on another disk, mounted where the old one was)? A vote counts a block on (device,
    sector), so reads on two devices never agree: two such recordings left no block in a
    majority ("nothing left to prefetch"), and more old ones would outvote the new device's."""
    return main is not None and conn.execute(
        "SELECT 1 FROM block_requests WHERE recording_id = ? AND dev = ? AND is_write = 0 LIMIT 1",
        (old, main)).fetchone() is None


def _programs_changed(conn: sqlite3.Connection, old: int, new: int) -> bool:
    """Did a program file the old recording read (an executable it ran, a shared object) change:
    another identity in the new recording, or no longer on disk as recorded (an upgrade, or a
    disk brought up again elsewhere: its blocks are not where the old recording saw them)?"""
    ran = {bytes(r[0]) for r in conn.execute("SELECT exec_path FROM recording_processes WHERE recording_id IN"
                                              " (?, ?) AND exec_path IS NOT NULL", (old, new))}

    def program(path: bytes) -> bool:
        base = os.path.basename(path)
        return path in ran or base.endswith(b".so") or b".so." in base
    if any(program(bytes(r[0])) for r in conn.execute(
            "SELECT a.path FROM recording_files a JOIN recording_files b ON a.path = b.path"
            " WHERE a.recording_id = ? AND b.recording_id = ? AND a.path IS NOT NULL AND"
            " (a.ino != b.ino OR a.size IS NOT b.size OR a.mtime_ns IS NOT b.mtime_ns)", (old, new))):
        return True
    for path, ino, size, mtime_ns in conn.execute(
            "SELECT path, ino, size, mtime_ns FROM recording_files WHERE recording_id = ? AND path IS NOT NULL",
            (old,)):
        if not program(bytes(path)):
            continue
        try:
            st = os.stat(bytes(path))
        except OSError:
            return True
        if st.st_ino != ino or (size is not None and st.st_size != size) or \
                (mtime_ns is not None and st.st_mtime_ns != mtime_ns):
            return True
    return False


def prune_recordings(conn: sqlite3.Connection, app_id: Optional[int] = None,
                     keep: Optional[int] = None) -> List[int]:
    """Delete superseded recordings and, with `keep`, all but the newest `keep` current ones of
    each app; returns the deleted ids."""
    where, args = "", []
    if app_id is not None:
        where, args = " AND app_id = ?", [app_id]
    doomed = [r[0] for r in conn.execute(f"SELECT id FROM recordings WHERE superseded_by IS NOT NULL{where}", args)]
    if keep is not None:
        for (a,) in conn.execute(f"SELECT DISTINCT app_id FROM recordings WHERE 1{where}", args).fetchall():
            doomed += [r[0] for r in conn.execute(
                "SELECT id FROM recordings WHERE app_id = ? AND superseded_by IS NULL ORDER BY id DESC"
                " LIMIT -1 OFFSET ?", (a, keep))]
    with transaction(conn):
        conn.executemany("DELETE FROM recordings WHERE id = ?", [(i,) for i in doomed])
    return sorted(doomed)


def list_recordings(conn: sqlite3.Connection, app_id: Optional[int] = None) -> List[sqlite3.Row]:
    """Recordings (newest last) with their app name and request count; all apps if app_id is None."""
    sql = ("SELECT r.*, a.name AS app_name,"
           " (SELECT count(*) FROM block_requests b WHERE b.recording_id = r.id) AS n_requests,"
           # total(), not sum(): a damaged nr_sectors must reach the row checks, not overflow here
           " (SELECT CAST(total(nr_sectors) * 512 AS INTEGER) FROM block_requests b"
           "   WHERE b.recording_id = r.id AND NOT b.is_write) AS read_bytes"
           " FROM recordings r JOIN apps a ON a.id = r.app_id")
    if app_id is None:
        return check_all("recordings", conn.execute(sql + " ORDER BY a.name, r.id"))
    return check_all("recordings", conn.execute(sql + " WHERE r.app_id = ? ORDER BY r.id", (app_id,)))


def recording_times(conn: sqlite3.Connection, app: str) -> List[float]:
    """When each of the app's recordings started (unix seconds), oldest first."""
    return [check("recordings", r)["started_at"] for r in conn.execute(
        "SELECT r.id, r.started_at FROM recordings r JOIN apps a ON a.id = r.app_id"
        " WHERE a.name = ? ORDER BY r.started_at", (app,))]


def latest_recording_id(conn: sqlite3.Connection, app: str) -> Optional[int]:
    row = conn.execute("SELECT r.id FROM recordings r JOIN apps a ON a.id = r.app_id WHERE a.name = ?"
                       " ORDER BY r.started_at DESC, r.id DESC LIMIT 1", (app,)).fetchone()
    return row[0] if row else None


def recorded_extents_complete(conn: sqlite3.Connection, app: str) -> bool:
    """Do all of the app's recordings carry their (non-empty) files' extents at record time?"""
    row = conn.execute("SELECT COUNT(*) FROM recording_files f JOIN recordings r ON r.id = f.recording_id"
                       " JOIN apps a ON a.id = r.app_id WHERE a.name = ? AND f.path IS NOT NULL"
                       " AND f.size > 0 AND f.extents_json IS NULL", (app,)).fetchone()
    return row[0] == 0


def get_recording(conn: sqlite3.Connection, recording_id: int) -> Optional[sqlite3.Row]:
    row = conn.execute("SELECT * FROM recordings WHERE id = ?", (recording_id,)).fetchone()
    return None if row is None else check("recordings", row)


def latest_ok_recording_id(conn: sqlite3.Connection, app_name: str) -> Optional[int]:
    """The id of the app's newest recording whose status is ok, or None."""
    row = conn.execute("SELECT r.id FROM recordings r JOIN apps a ON a.id = r.app_id WHERE a.name = ?"
                       " AND r.status = 'ok' ORDER BY r.id DESC LIMIT 1", (app_name,)).fetchone()
    return None if row is None else row[0]


def recorded_files_on(conn: sqlite3.Connection, recording_id: int, dev: int, limit: int = 50) -> List[tuple]:
    """(path, ino, size) of at most `limit` files of the recording on device dev that have a path."""
    return [(bytes(r["path"]), r["ino"], r["size"]) for r in check_all("recording_files", conn.execute(
        "SELECT recording_id, dev, path, ino, size FROM recording_files WHERE recording_id = ? AND dev = ?"
        " AND path IS NOT NULL LIMIT ?", (recording_id, dev, limit)))]


def recording_env(row) -> Dict:
    return json.loads(check("recordings", row)["env_json"])


def count_recordings(conn: sqlite3.Connection, name: str) -> Optional[int]:
    """How many recordings app NAME has, None if there is no such app. Reads no row's values:
    `forget`, the fix a refused row names, must work however damaged the app's rows are."""
    row = conn.execute("SELECT (SELECT count(*) FROM recordings r WHERE r.app_id = a.id) FROM apps a"
                       " WHERE a.name = ?", (name,)).fetchone()
    return None if row is None else row[0]


def delete_app(conn: sqlite3.Connection, name: str) -> bool:
    """Delete an app with all its recordings (and, by cascade, its schedules and launches)."""
    with transaction(conn):
        return conn.execute("DELETE FROM apps WHERE name = ?", (name,)).rowcount > 0


def load_block_requests(conn: sqlite3.Connection, recording_id: int) -> List[BlockRequest]:
    """The requests of one recording in issue order (p_1..p_n)."""
    rows = conn.execute("SELECT * FROM block_requests WHERE recording_id = ? ORDER BY seq", (recording_id,))
    return [BlockRequest(dev=r["dev"], sector=r["sector"], nr_sectors=r["nr_sectors"], rwbs=r["rwbs"],
                         issue_ns=r["issue_ns"], queue_ns=r["queue_ns"], complete_ns=r["complete_ns"],
                         pid=r["pid"], tid=r["tid"], comm=r["comm"], cpu_before_ns=r["cpu_before_ns"],
                         busy_after_ns=r["busy_after_ns"], busy_union_after_ns=r["busy_union_after_ns"])
            for r in check_all("block_requests", rows)]


def load_page_cache_adds(conn: sqlite3.Connection, recording_id: int) -> List[PageAdd]:
    rows = conn.execute("SELECT * FROM page_cache_adds WHERE recording_id = ? ORDER BY seq", (recording_id,))
    return [PageAdd(t_ns=r["t_ns"], dev=r["dev"], ino=r["ino"], first_index=r["first_index"],
                    nr_pages=r["nr_pages"]) for r in check_all("page_cache_adds", rows)]


def traced_page_uses(conn: sqlite3.Connection, recording_id: int) -> bool:
    """Whether the recorder traced the launch's page uses (recorders before that did not)."""
    return conn.execute("SELECT json_extract(env_json, '$.used_pages') IS NOT NULL FROM recordings WHERE id = ?",
                        (recording_id,)).fetchone()[0] == 1


def load_page_uses(conn: sqlite3.Connection, recording_id: int) -> List[UsedRun]:
    rows = conn.execute("SELECT * FROM page_uses WHERE recording_id = ? ORDER BY dev, ino, first_index",
                        (recording_id,))
    return [UsedRun(dev=r["dev"], ino=r["ino"], first_index=r["first_index"], nr_pages=r["nr_pages"])
            for r in check_all("page_uses", rows)]


def load_lookups(conn: sqlite3.Connection, recording_id: int) -> List[Tuple[int, int, bytes]]:
    """The names the recording looked up past the dentry cache (Recording.lookups), in order."""
    rows = conn.execute("SELECT * FROM recording_lookups WHERE recording_id = ? ORDER BY seq", (recording_id,))
    return [(r["dev"], r["dir_ino"], bytes(r["name"])) for r in check_all("recording_lookups", rows)]


def latest_file_devs(conn: sqlite3.Connection, app_name: str) -> List[int]:
    """Page-cache devs of the files of app_name's latest recording (none if it has none)."""
    rows = conn.execute("SELECT DISTINCT dev FROM recording_files WHERE recording_id ="
                        " (SELECT max(r.id) FROM recordings r JOIN apps a ON a.id = r.app_id WHERE a.name = ?)",
                        (app_name,))
    return [r[0] for r in rows]


def load_recording_files(conn: sqlite3.Connection, recording_id: int) -> List[FileInfo]:
    rows = conn.execute("SELECT * FROM recording_files WHERE recording_id = ? ORDER BY dev, ino", (recording_id,))
    return [FileInfo(dev=r["dev"], ino=r["ino"], path=bytes(r["path"]) if r["path"] is not None else None,
                     size=r["size"], mtime_ns=r["mtime_ns"], ctime_ns=r["ctime_ns"],
                     extents=None if r["extents_json"] is None else
                     [Extent(*e) for e in extents_of("recording_files", r)]) for r in check_all("recording_files", rows)]


def load_processes(conn: sqlite3.Connection, recording_id: int) -> List[Process]:
    rows = conn.execute("SELECT * FROM recording_processes WHERE recording_id = ? ORDER BY pid", (recording_id,))
    return [Process(pid=r["pid"], tgid=r["pid"], ppid=r["ppid"], comm=r["comm"],
                    exec_path=bytes(r["exec_path"]) if r["exec_path"] is not None else None,
                    start_ns=r["start_ns"], exit_ns=r["exit_ns"], oncpu_ns=r["oncpu_ns"])
            for r in check_all("recording_processes", rows)]


def cold_recordings(conn: sqlite3.Connection, names: Sequence[str] = ()) -> List[sqlite3.Row]:
    """Recordings that are cold launches (caches dropped first, nothing lost, the app succeeded),
    oldest first, with the app's name: the cold reference of apps launched only with prefetch."""
    where = ["r.cold_method = 'drop_caches'", "r.status = 'ok'", "coalesce(r.exit_status, 0) = 0"]
    if names:
        where.append(f"a.name IN ({','.join('?' * len(names))})")
    return check_all("recordings", conn.execute(
        "SELECT a.name AS app_name, r.id, r.started_at, r.launch_time_s, r.env_json,"
        " (SELECT dev FROM block_requests b WHERE b.recording_id = r.id GROUP BY dev"
        "  ORDER BY count(*) DESC LIMIT 1) AS main_dev"
        " FROM recordings r JOIN apps a ON a.id = r.app_id WHERE " + " AND ".join(where) +
        " ORDER BY r.started_at, r.id", list(names)))


def recorded_launch_s(conn: sqlite3.Connection, recording_ids: Sequence[int]) -> Optional[float]:
    """The median launch time of these recordings (the cold launches a schedule was made from)."""
    if not recording_ids:
        return None
    times = sorted(check("recordings", r)["launch_time_s"] for r in conn.execute(
        f"SELECT id, launch_time_s FROM recordings WHERE id IN ({','.join('?' * len(recording_ids))})"
        " AND launch_time_s > 0", list(recording_ids)))
    return times[len(times) // 2] if times else None


def recording_owners(conn: sqlite3.Connection, recording_ids: Sequence[int]) -> List[Optional[int]]:
    """Whose launches these recordings are (recordings.owner_uid): 0 root's (`warmstart record`
    as root), a uid for a launch of that user's the learner recorded, None when not known (learned
    before owners were kept)."""
    if not recording_ids:
        return []
    return [check("recordings", r)["owner_uid"] for r in conn.execute(
        f"SELECT id, owner_uid FROM recordings WHERE id IN ({','.join('?' * len(recording_ids))})",
        list(recording_ids))]
