"""The SQL schema of the warmstart database: the only module that creates or alters tables.

Migrations are named and applied in order, each in one transaction together with its record
(PRAGMA user_version = its number), so a crash leaves either the old or the new schema. A
migration is SQL, or a function of the connection where rows must be rewritten in Python.

Conventions used by every table:
- paths are BLOBs (file names are bytes on Linux; non-UTF-8 names must round-trip);
- `dev` is a userspace dev_t, os.makedev(major, minor);
- LBAs and lengths of block ranges are in 512-byte sectors (`sector`, `nr_sectors`), the unit
  the kernel's block tracepoints report; file offsets and lengths are in bytes;
- times inside a launch are integer nanoseconds from the launch start (`*_ns`); wall-clock
  timestamps are unix seconds (`*_at`, REAL); durations in seconds are `*_s` (REAL).
"""

import json
import os

# The application_id PRAGMA marks a file as ours ("WRMS"); a foreign SQLite file is refused.
APPLICATION_ID = 0x57524D53


def _redact_command_lines(conn) -> None:
    """Databases written before it kept every recorded argument: keep the signature only
    (signature.py). connection._migrate runs this with secure_delete on, so the old text does not
    stay in freed pages, and truncates the WAL afterwards."""
    from ..signature import signature_argv
    for app_id, exe, argv_json in conn.execute("SELECT id, executable, argv_json FROM apps").fetchall():
        argv = [os.fsencode(a) for a in json.loads(argv_json)]
        kept = json.dumps([os.fsdecode(a) for a in signature_argv(bytes(exe), argv)])
        if kept != argv_json:
            conn.execute("UPDATE apps SET argv_json = ? WHERE id = ?", (kept, app_id))


MIGRATIONS = [
    ("initial", """
CREATE TABLE apps (
    id            INTEGER PRIMARY KEY,
    name          TEXT NOT NULL UNIQUE,
    executable    BLOB NOT NULL,          -- resolved path of argv[0]
    argv_json     TEXT NOT NULL,          -- JSON list; non-UTF-8 arguments as surrogateescape'd str
    exe_dev       INTEGER,
    exe_ino       INTEGER,
    exe_size      INTEGER,
    exe_mtime_ns  INTEGER,
    created_at    REAL NOT NULL
);

CREATE TABLE recordings (
    id              INTEGER PRIMARY KEY,
    app_id          INTEGER NOT NULL REFERENCES apps(id) ON DELETE CASCADE,
    started_at      REAL NOT NULL,
    launch_time_s   REAL NOT NULL,         -- launch start to launch end (per --until)
    end_reason      TEXT NOT NULL,         -- exit | idle | stdout | file | timeout
    exit_status     INTEGER,               -- of CMD, NULL if it was still running at the end
    backend         TEXT NOT NULL,         -- tracefs | blktrace
    cold_method     TEXT NOT NULL,         -- drop_caches | evict | none
    lost_events     INTEGER NOT NULL DEFAULT 0,
    status          TEXT NOT NULL DEFAULT 'ok' CHECK (status IN ('ok', 'lost-events')),
    cpu_total_s     REAL,                  -- user+sys of CMD and all its descendants
    cpu_tail_ns     INTEGER NOT NULL DEFAULT 0,  -- launch CPU after the last request completed (docs/recording.md)
    warm_cpu_s      REAL,                  -- user+sys of one untraced warm launch right after (NULL: not run)
    env_json        TEXT NOT NULL DEFAULT '{}'  -- kernel, devices, file systems, tracer settings
);
CREATE INDEX recordings_app ON recordings(app_id);

CREATE TABLE recording_processes (
    recording_id  INTEGER NOT NULL REFERENCES recordings(id) ON DELETE CASCADE,
    pid           INTEGER NOT NULL,
    ppid          INTEGER,
    comm          TEXT,
    exec_path     BLOB,
    start_ns      INTEGER,
    exit_ns       INTEGER,
    oncpu_ns      INTEGER NOT NULL DEFAULT 0,   -- from sched_stat_runtime
    PRIMARY KEY (recording_id, pid)
);

-- Every block request of the launch, in issue order (seq).
CREATE TABLE block_requests (
    recording_id  INTEGER NOT NULL REFERENCES recordings(id) ON DELETE CASCADE,
    seq           INTEGER NOT NULL,
    dev           INTEGER NOT NULL,
    sector        INTEGER NOT NULL,
    nr_sectors    INTEGER NOT NULL,
    rwbs          TEXT NOT NULL,           -- as the kernel prints it: R, RA, RM, W, WS, ...
    is_write      INTEGER NOT NULL,
    is_readahead  INTEGER NOT NULL,
    is_meta       INTEGER NOT NULL,
    queue_ns      INTEGER,
    issue_ns      INTEGER NOT NULL,
    complete_ns   INTEGER,
    pid           INTEGER,
    tid           INTEGER,
    comm          TEXT,
    cpu_before_ns INTEGER NOT NULL DEFAULT 0,  -- c_i: see docs/recording.md
    PRIMARY KEY (recording_id, seq)
);

-- Pages the launch brought into the page cache, as runs of consecutive page indexes.
CREATE TABLE page_cache_adds (
    recording_id  INTEGER NOT NULL REFERENCES recordings(id) ON DELETE CASCADE,
    seq           INTEGER NOT NULL,        -- order of the run's first page
    t_ns          INTEGER NOT NULL,
    dev           INTEGER NOT NULL,        -- s_dev of the file's superblock (0:N for block devices)
    ino           INTEGER NOT NULL,
    first_index   INTEGER NOT NULL,        -- page index in the file
    nr_pages      INTEGER NOT NULL,
    PRIMARY KEY (recording_id, seq)
);

-- inode -> path, resolved at record time, with the identity used for staleness checks.
CREATE TABLE recording_files (
    recording_id  INTEGER NOT NULL REFERENCES recordings(id) ON DELETE CASCADE,
    dev           INTEGER NOT NULL,
    ino           INTEGER NOT NULL,
    path          BLOB,                    -- NULL when it could not be resolved
    size          INTEGER,
    mtime_ns      INTEGER,
    ctime_ns      INTEGER,
    PRIMARY KEY (recording_id, dev, ino)
);

CREATE TABLE device_profiles (
    id            INTEGER PRIMARY KEY,
    device        TEXT NOT NULL,           -- /dev/... path as given
    dev           INTEGER NOT NULL,
    size_bytes    INTEGER NOT NULL,
    measured_at   REAL NOT NULL,
    duration_s    REAL NOT NULL,
    profile_json  TEXT NOT NULL            -- seek curve, transfer rates, C_switch, strip geometry
);

CREATE TABLE schedules (
    id            INTEGER PRIMARY KEY,
    app_id        INTEGER NOT NULL REFERENCES apps(id) ON DELETE CASCADE,
    created_at    REAL NOT NULL,
    algorithm     TEXT NOT NULL,           -- paper | optimal | ...
    probe         TEXT NOT NULL,           -- disk | model | hybrid
    profile_id    INTEGER REFERENCES device_profiles(id) ON DELETE SET NULL,
    recording_ids TEXT NOT NULL,           -- JSON list of the recordings merged
    t_exp_s       REAL NOT NULL,
    total_bytes   INTEGER NOT NULL,
    waste_bytes   INTEGER NOT NULL DEFAULT 0,  -- gap bytes read through by competitive merging
    stale         INTEGER NOT NULL DEFAULT 0,
    active        INTEGER NOT NULL DEFAULT 1,  -- the schedule `run` uses for the app
    params_json   TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX schedules_app ON schedules(app_id);

-- Files a schedule reads, with the identity checked before replay.
CREATE TABLE schedule_files (
    schedule_id   INTEGER NOT NULL REFERENCES schedules(id) ON DELETE CASCADE,
    file_no       INTEGER NOT NULL,
    path          BLOB NOT NULL,
    dev           INTEGER NOT NULL,
    ino           INTEGER NOT NULL,
    size          INTEGER NOT NULL,
    mtime_ns      INTEGER NOT NULL,
    ctime_ns      INTEGER NOT NULL,
    PRIMARY KEY (schedule_id, file_no)
);

-- FIEMAP of each scheduled file at analysis time.
CREATE TABLE file_extents (
    schedule_id   INTEGER NOT NULL,
    file_no       INTEGER NOT NULL,
    logical       INTEGER NOT NULL,        -- bytes
    physical      INTEGER NOT NULL,        -- bytes on the device
    length        INTEGER NOT NULL,
    flags         INTEGER NOT NULL DEFAULT 0,
    FOREIGN KEY (schedule_id, file_no) REFERENCES schedule_files(schedule_id, file_no) ON DELETE CASCADE
);
CREATE INDEX file_extents_file ON file_extents(schedule_id, file_no);

CREATE TABLE segments (
    schedule_id   INTEGER NOT NULL REFERENCES schedules(id) ON DELETE CASCADE,
    idx           INTEGER NOT NULL,        -- 1 = the pre-buffer, fetched before the app runs
    first_p       INTEGER NOT NULL,        -- the segment is p[first_p .. last_p] of P (1-based)
    last_p        INTEGER NOT NULL,
    t_disk_s      REAL NOT NULL,           -- t_i: disk time of the LBA-sorted segment
    cpu_s         REAL NOT NULL,           -- CPU time of the app within the segment
    bytes         INTEGER NOT NULL,
    PRIMARY KEY (schedule_id, idx)
);

-- The ranges to fetch, LBA-sorted within each segment (ord). A file range has file_no and a
-- byte range of that file; a device range (metadata) has file_no NULL.
CREATE TABLE schedule_ranges (
    schedule_id   INTEGER NOT NULL REFERENCES schedules(id) ON DELETE CASCADE,
    segment_idx   INTEGER NOT NULL,
    ord           INTEGER NOT NULL,
    dev           INTEGER NOT NULL,
    sector        INTEGER NOT NULL,
    nr_sectors    INTEGER NOT NULL,
    file_no       INTEGER,
    file_offset   INTEGER,
    length        INTEGER NOT NULL,        -- bytes
    orig_pos      INTEGER,                 -- p index (1-based) of the range's first access in P; interleave replays in this order
    PRIMARY KEY (schedule_id, segment_idx, ord),
    FOREIGN KEY (schedule_id, segment_idx) REFERENCES segments(schedule_id, idx) ON DELETE CASCADE
);

-- Measured launches (warmstart run, bench, hook).
CREATE TABLE launches (
    id            INTEGER PRIMARY KEY,
    app_id        INTEGER REFERENCES apps(id) ON DELETE CASCADE,
    schedule_id   INTEGER REFERENCES schedules(id) ON DELETE SET NULL,
    bench_id      TEXT,                    -- groups the launches of one `warmstart bench` run
    mode          TEXT NOT NULL,           -- cold | warm | interleave | reorder | segmented | ...
    mechanism     TEXT,                    -- fetch engine used by the replayer
    disk          TEXT,                    -- hdd7200 | ssd | real | ...
    started_at    REAL NOT NULL,
    launch_time_s REAL NOT NULL,           -- NULL allowed from migration "launch times may be unknown"
    exit_status   INTEGER,
    prefetched_bytes INTEGER,
    used_bytes    INTEGER,
    prefetched_used_bytes INTEGER,
    details_json  TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX launches_app ON launches(app_id, mode);

-- Each `warmstart relocate` that moved data (dry runs are not recorded).
CREATE TABLE relocations (
    id            INTEGER PRIMARY KEY,
    created_at    REAL NOT NULL,
    apps_json     TEXT NOT NULL,           -- JSON list of the app names relocated together
    dev           INTEGER NOT NULL,        -- st_dev of the file system
    region_sector INTEGER,                 -- first sector of the region (on dev)
    region_bytes  INTEGER NOT NULL,
    moved_files   INTEGER NOT NULL,
    moved_bytes   INTEGER NOT NULL,
    report_json   TEXT NOT NULL DEFAULT '{}'  -- refusals, model before/after, re-analysis
);
"""),
    # Where each file's bytes were when it was recorded, so a recording still maps to files after
    # their data moved (warmstart relocate, e4defrag): [[logical, physical, length, flags], ...]
    # in bytes, FIEMAP's mappable extents; NULL when not taken (older recordings, not FIEMAP-able).
    ("recorded extents", """
ALTER TABLE recording_files ADD COLUMN extents_json TEXT;
"""),
    # Pages the launch used (read(), faulted or mapped: the filemap get_pages, fault and map_pages
    # tracepoints), whether they were cached or not, merged into runs per file. The analyzer
    # fetches only these of what the cold launch read (its readahead reads more).
    ("page uses", """
CREATE TABLE page_uses (
    recording_id  INTEGER NOT NULL REFERENCES recordings(id) ON DELETE CASCADE,
    dev           INTEGER NOT NULL,
    ino           INTEGER NOT NULL,
    first_index   INTEGER NOT NULL,        -- page index (4 KiB) in the file
    nr_pages      INTEGER NOT NULL,
    PRIMARY KEY (recording_id, dev, ino, first_index)
);
"""),
    # A recording made because the app changed (its schedule went stale, or the files it reads
    # were upgraded) replaces the older ones: they no longer vote in `analyze` (docs/recording.md).
    ("superseded recordings", """
ALTER TABLE recordings ADD COLUMN superseded_by INTEGER REFERENCES recordings(id) ON DELETE SET NULL;
"""),
    # The disk half of a launch's lower bound: all of its blocks read in one LBA-sorted pass
    # (bench measures it with O_DIRECT, or estimates it with the disk's profile where the node
    # refuses O_DIRECT). The report marks LB = max(warm, this) on its bars.
    ("sorted passes", """
CREATE TABLE sorted_passes (
    id            INTEGER PRIMARY KEY,
    app_id        INTEGER NOT NULL REFERENCES apps(id) ON DELETE CASCADE,
    recording_id  INTEGER REFERENCES recordings(id) ON DELETE SET NULL,
    bench_id      TEXT,
    disk          TEXT,                    -- as launches.disk
    seconds       REAL NOT NULL,
    bytes         INTEGER NOT NULL,
    ranges        INTEGER NOT NULL,
    modelled      TEXT,                    -- NULL: timed; else why and how it was estimated
    measured_at   REAL NOT NULL
);
CREATE INDEX sorted_passes_app ON sorted_passes(app_id, disk);
"""),
    # A recorded command line is kept only as far as the app's signature needs it (issue 17).
    ("command lines redacted", _redact_command_lines),
    # When and why a schedule went stale (the hook's feedback, or its files changed): the report's
    # history marks it. NULL for schedules marked before this column or never stale.
    ("stale since", """
ALTER TABLE schedules ADD COLUMN stale_at REAL;
ALTER TABLE schedules ADD COLUMN stale_reason TEXT;
"""),
    # Whose launch a recording is (issue 23): the learner records a user's real launch, and the
    # schedule made from it serves that user's launches only (hook/entries.py). 0: recorded by
    # root (`warmstart record`), usable by all. NULL: learned before owners were kept, user
    # unknown: its schedule is left out of the hook until re-learned.
    ("recording owners", """
ALTER TABLE recordings ADD COLUMN owner_uid INTEGER;
UPDATE recordings SET owner_uid = 0 WHERE cold_method NOT LIKE 'none (learned%';
"""),
    # A launch without an exact time (a hooked app still running when its replayer's wait ended,
    # or no replayer report) is stored as such: launch_time_s NULL, details_json's "not_timed"
    # says why. The hook's feedback stored -1.0 for these before: they become NULL with that
    # reason, so no placeholder can enter a median, a gain or a history. Hook rows' used and
    # prefetched-and-used bytes were the schedule's resident bytes at the exit (coverage, kept in
    # details_json's feedback), not pages the app used: emptied, as hook rows store them now.
    ("launch times may be unknown", """
CREATE TABLE launches_new (
    id            INTEGER PRIMARY KEY,
    app_id        INTEGER REFERENCES apps(id) ON DELETE CASCADE,
    schedule_id   INTEGER REFERENCES schedules(id) ON DELETE SET NULL,
    bench_id      TEXT,
    mode          TEXT NOT NULL,
    mechanism     TEXT,
    disk          TEXT,
    started_at    REAL NOT NULL,
    launch_time_s REAL CHECK (launch_time_s IS NULL OR launch_time_s >= 0),  -- NULL: not timed
    exit_status   INTEGER,
    prefetched_bytes INTEGER,
    used_bytes    INTEGER,
    prefetched_used_bytes INTEGER,
    details_json  TEXT NOT NULL DEFAULT '{}'
);
INSERT INTO launches_new (id, app_id, schedule_id, bench_id, mode, mechanism, disk, started_at, launch_time_s,
                          exit_status, prefetched_bytes, used_bytes, prefetched_used_bytes, details_json)
SELECT id, app_id, schedule_id, bench_id, mode, mechanism, disk, started_at,
       CASE WHEN launch_time_s < 0 THEN NULL ELSE launch_time_s END, exit_status, prefetched_bytes,
       CASE WHEN mode = 'hook' THEN NULL ELSE used_bytes END,
       CASE WHEN mode = 'hook' THEN NULL ELSE prefetched_used_bytes END,
       CASE WHEN launch_time_s < 0 THEN json_set(coalesce(details_json, '{}'), '$.not_timed',
            'no exact time (stored as -1 s by an older warmstart: the app had not exited when the replayer stopped waiting, or it left no report)')
            ELSE details_json END
FROM launches;
DROP TABLE launches;
ALTER TABLE launches_new RENAME TO launches;
CREATE INDEX launches_app ON launches(app_id, mode);
"""),
    # The CPU half of the launch's lower bound (analyzer/bound.py): wall time during which some
    # task of the launch was on CPU after each read completed (NULL: recorded before this column);
    # and the bound's parts beside each sorted pass, so a report attaches a bench's own bound.
    ("busy after reads", """
ALTER TABLE block_requests ADD COLUMN busy_after_ns INTEGER;
ALTER TABLE sorted_passes ADD COLUMN schedule_id INTEGER REFERENCES schedules(id) ON DELETE SET NULL;
ALTER TABLE sorted_passes ADD COLUMN schedule_pass_s REAL;
ALTER TABLE sorted_passes ADD COLUMN cut_bound_s REAL;
"""),
    # busy_after_ns became the CPU of the tasks that depend on each read (the bound's: the union
    # of all tasks was no bound); the union, which places the launch's CPU for the segmentation
    # (analyzer/sequence.placed_cpu), is kept beside it. NULL: recorded before.
    ("busy union after reads", """
ALTER TABLE block_requests ADD COLUMN busy_union_after_ns INTEGER;
"""),
    # The names a launch looked up past the dentry cache, where its file system has a tracepoint
    # for them (XFS: xfs_lookup): the directory (dev_t, inode) and the name, existing or not. The
    # analyzer has the metadata step read the directories no scheduled path passes
    # (analyzer/lookups.py). No rows: none made, or recorded before this table.
    ("name lookups", """
CREATE TABLE recording_lookups (
    recording_id  INTEGER NOT NULL REFERENCES recordings(id) ON DELETE CASCADE,
    seq           INTEGER NOT NULL,        -- order first seen
    dev           INTEGER NOT NULL,
    dir_ino       INTEGER NOT NULL,
    name          BLOB NOT NULL,
    PRIMARY KEY (recording_id, seq)
);
"""),
]

SCHEMA_VERSION = len(MIGRATIONS)
