"""Open (and create or migrate) the warmstart database, refusing files that are not ours."""

import os
import sqlite3
from pathlib import Path
from typing import Optional, Union

from ..errors import WarmstartError, as_user_error
from ..paths import PRIVATE_MODE, default_db_path, tighten_private
from .schema import APPLICATION_ID, MIGRATIONS, SCHEMA_VERSION

def _check_ours(conn: sqlite3.Connection, path: Path) -> None:
    """Refuse another program's database and a schema newer than ours; an empty file is fine."""
    app_id = conn.execute("PRAGMA application_id").fetchone()[0]
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
    if app_id != APPLICATION_ID and (app_id != 0 or tables or version):
        raise WarmstartError(f"{path} is an SQLite database of another program (application_id {app_id:#x}); "
                             f"it was left untouched: pass --db PATH to use another file")
    if version > SCHEMA_VERSION:
        raise WarmstartError(f"{path} has schema version {version}, newer than this warmstart knows "
                             f"({SCHEMA_VERSION}): upgrade warmstart")


def run_step(conn: sqlite3.Connection, step) -> None:
    """Run one migration's step (its SQL, statement by statement, or its function) on conn, in
    whatever transaction the caller holds."""
    if callable(step):
        step(conn)
    else:
        for statement in _split_sql(step):
            conn.execute(statement)


def _migrate(conn: sqlite3.Connection, path: Path) -> None:
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    for number, (name, step) in enumerate(MIGRATIONS, start=1):
        if number <= version:
            continue
        rewrites = callable(step)
        if rewrites:   # rows rewritten to remove data: no copy of the old text in freed pages
            conn.execute("PRAGMA secure_delete = ON")
        # executescript would commit on its own; run statement by statement inside one transaction.
        conn.execute("BEGIN IMMEDIATE")
        try:
            run_step(conn, step)
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            conn.execute(f"PRAGMA user_version = {number}")
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:   # SQLite ends it itself on some errors (a full disk)
                conn.execute("ROLLBACK")
            raise
        if rewrites:   # ... nor in the write-ahead log
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            conn.execute("PRAGMA secure_delete = OFF")


def _split_sql(script: str):
    statement = ""
    for line in script.splitlines(keepends=True):
        statement += line
        if sqlite3.complete_statement(statement):
            if statement.strip():
                yield statement
            statement = ""
    if statement.strip():
        yield statement


last_opened: Optional[Path] = None   # the database this process opened last (for error messages)

# PRIVATE_MODE (paths.py): the database holds command lines and the paths of every file a launch read


def _create_private(path: Path) -> None:
    """Create the database file readable by its owner only (SQLite gives its -wal and -shm files
    the database's mode)."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, PRIVATE_MODE))
    except FileExistsError:
        pass
    except OSError as e:
        raise WarmstartError(f"cannot create database {path}: {e.strerror}; pass --db PATH to a writable place")


def _tighten(path: Path) -> None:
    """Make a database we own that an older warmstart left readable by others private, and its
    -wal, -shm and -journal files: never through a symlink (the database may be in a directory
    another user writes: a link there must not make us chmod a file of their choosing), and
    without a read fd, whose close would drop this process's POSIX locks on it (paths.py)."""
    for suffix in ("", "-wal", "-shm", "-journal"):
        tighten_private(f"{path}{suffix}")


def open_db(path: Optional[Union[str, os.PathLike]] = None) -> sqlite3.Connection:
    """Open the database at `path` (default: see paths.default_db_path), creating it if absent.

    Returns a connection with foreign keys on, WAL journaling and sqlite3.Row rows.
    """
    global last_opened
    path = Path(path) if path else default_db_path()
    last_opened = path
    if path.exists() and not os.access(path, os.R_OK):
        raise WarmstartError(f"cannot read database {path}: permission denied; check its permissions "
                             f"or pass --db PATH")
    if not path.exists():
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise WarmstartError(f"cannot create {path.parent}: {e.strerror}; pass --db PATH to a writable place")
        _create_private(path)
    conn = None
    try:
        conn = sqlite3.connect(str(path), timeout=30, isolation_level=None)
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA busy_timeout = 30000")
        _check_ours(conn, path)  # before anything that could write to a foreign file
        _tighten(path)
        if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        _migrate(conn, path)
    except BaseException as e:
        if conn is not None:
            conn.close()
        if not isinstance(e, sqlite3.DatabaseError):
            raise
        full = as_user_error(e, path)
        if full is not None:
            raise full from None
        # SQLite itself recognises foreign files: reading the header with open()/close() here
        # would drop this process's POSIX locks on the database held by other connections.
        what = ("is not an SQLite database (corrupt or another program's file)"
                if "not a database" in str(e) else f"cannot be used: {e}")
        raise WarmstartError(f"{path} {what}; it was left untouched: move it away or pass --db PATH")
    return conn


def transaction(conn: sqlite3.Connection):
    """`with transaction(conn):` runs the block in one BEGIN IMMEDIATE ... COMMIT (ROLLBACK on error)."""
    return _Transaction(conn)


class _Transaction:
    def __init__(self, conn):
        self.conn = conn

    def __enter__(self):
        self.conn.execute("BEGIN IMMEDIATE")
        return self.conn

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.conn.execute("COMMIT")
        elif self.conn.in_transaction:   # SQLite ends it itself on some errors (a full disk)
            self.conn.execute("ROLLBACK")
        return False


COUNTED_TABLES = ("apps", "recordings", "block_requests", "schedules", "device_profiles", "launches")


def database_file(conn: sqlite3.Connection) -> str:
    """The file the connection has open (its main database)."""
    return conn.execute("PRAGMA database_list").fetchone()[2]


def describe(conn: sqlite3.Connection) -> dict:
    """Schema version and row counts of the main tables (`warmstart db-info`)."""
    return {"schema_version": conn.execute("PRAGMA user_version").fetchone()[0],
            "counts": {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in COUNTED_TABLES}}
