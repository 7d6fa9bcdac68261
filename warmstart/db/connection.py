"""Open (and create or migrate) the warmstart database, refusing files that are not ours."""

import os
import sqlite3
from pathlib import Path
from typing import Optional, Union

from ..errors import WarmstartError
from ..paths import default_db_path
from .schema import APPLICATION_ID, MIGRATIONS, SCHEMA_VERSION

SQLITE_MAGIC = b"SQLite format 3\x00"


def _check_existing_file(path: Path) -> None:
    """Refuse, without touching it, a file that is not an SQLite database."""
    try:
        with open(path, "rb") as f:
            head = f.read(len(SQLITE_MAGIC))
    except OSError as e:
        raise WarmstartError(f"cannot read database {path}: {e.strerror}; check its permissions or pass --db PATH")
    if head and head != SQLITE_MAGIC:
        raise WarmstartError(f"{path} is not an SQLite database (corrupt or another program's file); "
                             f"it was left untouched: move it away or pass --db PATH")


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


def _migrate(conn: sqlite3.Connection, path: Path) -> None:
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    for number, (name, sql) in enumerate(MIGRATIONS, start=1):
        if number <= version:
            continue
        # executescript would commit on its own; run statement by statement inside one transaction.
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in _split_sql(sql):
                conn.execute(statement)
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            conn.execute(f"PRAGMA user_version = {number}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise


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


def open_db(path: Optional[Union[str, os.PathLike]] = None) -> sqlite3.Connection:
    """Open the database at `path` (default: see paths.default_db_path), creating it if absent.

    Returns a connection with foreign keys on, WAL journaling and sqlite3.Row rows.
    """
    path = Path(path) if path else default_db_path()
    if path.exists():
        _check_existing_file(path)
    else:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise WarmstartError(f"cannot create {path.parent}: {e.strerror}; pass --db PATH to a writable place")
    try:
        conn = sqlite3.connect(str(path), timeout=30, isolation_level=None)
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA busy_timeout = 30000")
        _check_ours(conn, path)  # before anything that could write to a foreign file
        if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        _migrate(conn, path)
    except sqlite3.DatabaseError as e:
        raise WarmstartError(f"cannot use database {path}: {e}; it was left untouched: "
                             f"move it away or pass --db PATH")
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
        self.conn.execute("ROLLBACK" if exc_type else "COMMIT")
        return False
