"""The SQLite store: creation, migrations, refusal of files that are not ours."""

import hashlib
import os
import sqlite3
import stat
import subprocess
import sys

import pytest

from warmstart.db import open_db
from warmstart.db.connection import transaction
from warmstart.db.schema import APPLICATION_ID, MIGRATIONS, SCHEMA_VERSION
from warmstart.errors import WarmstartError
from warmstart.paths import default_db_path


def digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_new_database_has_schema_wal_and_foreign_keys(db_path):
    conn = open_db(db_path)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"apps", "recordings", "block_requests", "file_extents", "segments", "schedules",
            "device_profiles", "launches"} <= tables
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == len(MIGRATIONS)
    assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    with pytest.raises(sqlite3.IntegrityError):
        conn.execute("INSERT INTO recordings(app_id, started_at, launch_time_s, end_reason, backend, cold_method)"
                     " VALUES (999, 0, 0, 'exit', 'tracefs', 'none')")


def test_reopen_keeps_data_and_applies_nothing_twice(db_path):
    conn = open_db(db_path)
    conn.execute("INSERT INTO apps(name, executable, argv_json, created_at) VALUES ('a', x'2f62696e', '[]', 0)")
    conn.close()
    conn = open_db(db_path)
    assert conn.execute("SELECT name FROM apps").fetchone()[0] == "a"


def test_failed_migration_rolls_back_with_its_record(db_path, monkeypatch):
    from warmstart.db import connection
    broken = list(MIGRATIONS) + [("broken", "CREATE TABLE half_done(x);\nTHIS IS NOT SQL;\n")]
    monkeypatch.setattr(connection, "MIGRATIONS", broken)
    monkeypatch.setattr(connection, "SCHEMA_VERSION", len(broken))
    with pytest.raises(WarmstartError):
        open_db(db_path)
    conn = sqlite3.connect(db_path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
    assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name='half_done'").fetchone()[0] == 0


def test_transaction_rolls_back_on_error(db_path):
    conn = open_db(db_path)
    with pytest.raises(RuntimeError):
        with transaction(conn):
            conn.execute("INSERT INTO apps(name, executable, argv_json, created_at) VALUES ('a', x'2f', '[]', 0)")
            raise RuntimeError("boom")
    assert conn.execute("SELECT count(*) FROM apps").fetchone()[0] == 0


def test_corrupt_file_is_refused_and_left_untouched(db_path):
    db_path.write_bytes(b"this is not a database\n" * 100)
    before = digest(db_path)
    with pytest.raises(WarmstartError, match="not an SQLite database"):
        open_db(db_path)
    assert digest(db_path) == before


def test_damaged_sqlite_file_is_refused_and_left_untouched(db_path):
    open_db(db_path).close()
    data = bytearray(db_path.read_bytes())
    data[100:4096] = b"\xff" * (4096 - 100)  # wreck the schema page, keep the magic
    db_path.write_bytes(bytes(data))
    before = digest(db_path)
    with pytest.raises(WarmstartError, match="left untouched"):
        open_db(db_path)
    assert digest(db_path) == before


def test_foreign_sqlite_database_is_refused_and_left_untouched(db_path):
    other = sqlite3.connect(db_path)
    other.execute("CREATE TABLE mail(id)")
    other.commit()
    other.close()
    before = digest(db_path)
    with pytest.raises(WarmstartError, match="another program"):
        open_db(db_path)
    assert digest(db_path) == before


def test_newer_schema_is_refused(db_path):
    open_db(db_path).close()
    conn = sqlite3.connect(db_path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(WarmstartError, match="upgrade warmstart"):
        open_db(db_path)


def test_default_location(monkeypatch, tmp_path):
    monkeypatch.delenv("WARMSTART_DB", raising=False)
    if os.geteuid() == 0:
        assert str(default_db_path()) == "/var/lib/warmstart/warmstart.db"
    monkeypatch.setenv("WARMSTART_DB", str(tmp_path / "x.db"))
    assert default_db_path() == tmp_path / "x.db"


def test_default_location_for_users_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv("WARMSTART_DB", raising=False)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert default_db_path() == tmp_path / "warmstart" / "warmstart.db"


def test_cli_reports_corrupt_database_without_traceback(db_path):
    db_path.write_bytes(b"garbage" * 50)
    proc = subprocess.run([sys.executable, "-m", "warmstart", "--db", str(db_path), "db-info"],
                          capture_output=True, text=True)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert "not an SQLite database" in proc.stderr and "--db PATH" in proc.stderr


def _mode(p):
    return stat.S_IMODE(os.stat(p).st_mode)


def test_new_database_is_private_from_the_first_write(tmp_path):
    """The database holds command lines and the paths of every file a launch read: owner only,
    with its WAL and shared-memory files too, whatever the umask."""
    old = os.umask(0o022)
    try:
        path = tmp_path / "new.db"
        conn = open_db(path)
        conn.execute("CREATE TABLE t (x)")  # forces the -wal file
        assert _mode(path) == 0o600
        for side in (f"{path}-wal", f"{path}-shm"):
            assert _mode(side) == 0o600, side
        conn.close()
    finally:
        os.umask(old)


def _older_database(path, version):
    """A database as a warmstart of schema `version` left it: only the first `version`
    migrations applied, one app in it, readable by everyone (as files were created then)."""
    from warmstart.db.connection import run_step
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    for number, (_, step) in enumerate(MIGRATIONS[:version], start=1):
        run_step(conn, step)
        conn.execute(f"PRAGMA user_version = {number}")
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute("INSERT INTO apps (name, executable, argv_json, created_at) VALUES ('old', x'2f62696e2f7368', "
                 "'[\"sh\"]', 1)")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    os.chmod(path, 0o644)


def _schema(conn):
    return conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY type, name").fetchall()


@pytest.mark.parametrize("version", range(1, SCHEMA_VERSION))
def test_readable_database_of_an_older_version_is_tightened(tmp_path, version):
    """Every older schema version: opening it tightens the file to 0600 and upgrades it to
    exactly the schema a new database gets, keeping its rows."""
    path = tmp_path / "old.db"
    _older_database(path, version)
    conn = open_db(path)
    assert _mode(path) == 0o600
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert [tuple(r) for r in conn.execute("SELECT name, argv_json FROM apps")] == [("old", '["sh"]')]
    fresh = open_db(tmp_path / "fresh.db")
    assert [tuple(r) for r in _schema(conn)] == [tuple(r) for r in _schema(fresh)]
    conn.close()
    fresh.close()


def test_foreign_database_keeps_its_mode(tmp_path):
    path = tmp_path / "foreign.db"
    other = sqlite3.connect(path)
    other.execute("PRAGMA application_id = 1234")
    other.execute("CREATE TABLE theirs (x)")
    other.close()
    os.chmod(path, 0o644)
    with pytest.raises(WarmstartError, match="another program"):
        open_db(path)
    assert _mode(path) == 0o644
