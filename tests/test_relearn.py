"""Re-learning converges: a recording made because the app changed replaces the older ones (they
no longer vote in analyze), `warmstart forget` removes an app, `recordings --prune` old ones."""

import json

from click.testing import CliRunner

from warmstart.analyzer.inputs import recordings as analyzer_recordings
from warmstart.cli import cli
from warmstart.db import open_db
from warmstart.db.recordings import get_app, insert_recording
from warmstart.recorder.model import FileInfo, Recording

LIB = b"/usr/lib/libapp.so.1"


def rec(lib_mtime_ns, lib_ino=7):
    return Recording(started_at=0, launch_time_s=1.0, end_reason="exit", exit_status=0, backend="tracefs",
                     cold_method="drop_caches",
                     files=[FileInfo(0x801, 5, b"/usr/bin/app", 1000, 1, 1), FileInfo(0x801, lib_ino, LIB, 5000, lib_mtime_ns, 1)])


def current(conn, app="app"):
    return [r.id for r in analyzer_recordings(conn, get_app(conn, app)["id"])]


def add(conn, r):
    return insert_recording(conn, "app", b"/usr/bin/app", ["app"], r)


def test_repeated_recordings_of_an_unchanged_app_all_vote(tmp_path):
    conn = open_db(tmp_path / "w.db")
    ids = [add(conn, rec(100)) for _ in range(3)]
    assert current(conn) == ids


def test_an_upgraded_library_supersedes_the_older_recordings(tmp_path):
    conn = open_db(tmp_path / "w.db")
    a, b = add(conn, rec(100)), add(conn, rec(100))
    c = add(conn, rec(200, lib_ino=9))  # the library was replaced (a package upgrade)
    assert current(conn) == [c]          # two old recordings can no longer outvote its blocks
    d = add(conn, rec(200, lib_ino=9))
    assert current(conn) == [c, d]
    assert [r.id for r in analyzer_recordings(conn, get_app(conn, "app")["id"], [a, b])] == [a, b]  # asked by id


def test_a_changed_data_file_does_not_supersede(tmp_path):
    """An app rewrites its own caches between launches: deliberate recordings still vote together."""
    conn = open_db(tmp_path / "w.db")
    ids = []
    for m in (1, 2, 3):
        r = rec(100)
        r.files.append(FileInfo(0x801, 40 + m, b"/var/cache/app/index.db", 100 * m, m, 1))
        ids.append(add(conn, r))
    assert current(conn) == ids


def test_a_re_recording_after_a_stale_schedule_replaces_the_old_ones(tmp_path):
    conn = open_db(tmp_path / "w.db")
    a = add(conn, rec(100))
    app = get_app(conn, "app")["id"]
    conn.execute("INSERT INTO schedules(app_id, created_at, algorithm, probe, recording_ids, t_exp_s, total_bytes,"
                 " active, stale) VALUES (?, 0, 'ours', 'model', ?, 0.1, 1, 1, 1)", (app, json.dumps([a])))
    b = add(conn, rec(100))  # same files, but the schedule went stale: the learner re-recorded it
    assert current(conn) == [b]


def test_prune_and_forget(tmp_path):
    db = tmp_path / "w.db"
    conn = open_db(db)
    for m in (100, 100, 200, 200, 200):
        add(conn, rec(m, lib_ino=m))  # the library changed once: 1 and 2 are superseded
    run = lambda *a: CliRunner().invoke(cli, ["--db", str(db), *a], catch_exceptions=False)  # noqa: E731
    r = run("recordings", "--prune", "--keep", "2", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["pruned"] == [1, 2, 3] and [x["id"] for x in doc["recordings"]] == [4, 5]
    r = run("forget", "app", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["recordings_deleted"] == 2
    assert get_app(conn, "app") is None
    assert conn.execute("SELECT count(*) FROM recordings").fetchone()[0] == 0
    r = CliRunner().invoke(cli, ["--db", str(db), "forget", "app"])
    assert r.exit_code != 0 and "warmstart recordings" in str(r.exception)
