"""Re-learning converges: a recording made because the app changed replaces the older ones (they
no longer vote in analyze), `warmstart forget` removes an app, `recordings --prune` old ones."""

import json
import os

from click.testing import CliRunner

from warmstart.analyzer.inputs import recordings as analyzer_recordings
from warmstart.cli import cli
from warmstart.db import open_db
from warmstart.db.recordings import get_app, insert_recording
from warmstart.model import BlockRequest, FileInfo, Recording

class App:
    """An installed app on a real file system: its executable and its shared library."""

    def __init__(self, tmp):
        self.exe, self.lib = tmp / "app", tmp / "libapp.so.1"
        self.exe.write_bytes(b"\x7fELF app")
        self.upgrade(b"v1")

    def upgrade(self, content):
        """A package upgrade: the library is replaced by rename (a new inode)."""
        new = self.lib.with_suffix(".new")
        new.write_bytes(content * 1000)
        os.replace(new, self.lib)

    def files(self, *extra):
        out = []
        for p in (self.exe, self.lib, *extra):
            st = os.stat(p)
            out.append(FileInfo(st.st_dev, st.st_ino, os.fsencode(p), st.st_size, st.st_mtime_ns, st.st_ctime_ns))
        return out


def rec(app, *extra):
    return Recording(started_at=0, launch_time_s=1.0, end_reason="exit", exit_status=0, backend="tracefs",
                     cold_method="drop_caches", files=app.files(*extra))


def current(conn, name="app"):
    return [r.id for r in analyzer_recordings(conn, get_app(conn, name)["id"])]


def add(conn, r):
    return insert_recording(conn, "app", b"/usr/bin/app", ["app"], r)


def test_repeated_recordings_of_an_unchanged_app_all_vote(tmp_path):
    conn, app = open_db(tmp_path / "w.db"), App(tmp_path)
    ids = [add(conn, rec(app)) for _ in range(3)]
    assert current(conn) == ids


def test_an_upgraded_library_supersedes_the_older_recordings(tmp_path):
    conn, app = open_db(tmp_path / "w.db"), App(tmp_path)
    a, b = add(conn, rec(app)), add(conn, rec(app))
    app.upgrade(b"v2")                   # the library was replaced (a package upgrade)
    c = add(conn, rec(app))
    assert current(conn) == [c]          # two old recordings can no longer outvote its blocks
    d = add(conn, rec(app))
    assert current(conn) == [c, d]
    assert [r.id for r in analyzer_recordings(conn, get_app(conn, "app")["id"], [a, b])] == [a, b]  # asked by id


def test_a_changed_data_file_does_not_supersede(tmp_path):
    """An app rewrites its own caches between launches: deliberate recordings still vote together."""
    conn, app = open_db(tmp_path / "w.db"), App(tmp_path)
    cache, ids = tmp_path / "index.db", []
    for m in (1, 2, 3):
        cache.write_bytes(b"x" * m)
        ids.append(add(conn, rec(app, cache)))
    assert current(conn) == ids


def test_a_program_gone_from_its_recorded_place_supersedes(tmp_path):
    """A disk brought up again at another mount point (bench): the old recording's files are not
    where it saw them, so its blocks must not outvote the new recording's."""
    conn = open_db(tmp_path / "w.db")
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    two = App(tmp_path / "two")
    a = add(conn, rec(App(tmp_path / "one")))
    b = add(conn, rec(two))
    assert current(conn) == [a, b]           # both still there: both vote
    os.unlink(tmp_path / "one" / "libapp.so.1")
    c = add(conn, rec(two))
    assert current(conn) == [b, c]


def test_reads_from_another_device_supersede(tmp_path):
    """The same files (still where both recordings saw them: an image mounted twice, or a disk
    renumbered at boot), but the new launch read from another block device: the old recording's
    blocks can never agree with its in a vote (two such recordings left nothing to prefetch in a
    bench run), so it no longer votes. A device both read keeps both voting."""
    conn, app = open_db(tmp_path / "w.db"), App(tmp_path)

    def reads(*devs):
        r = rec(app)
        r.requests = [BlockRequest(dev, 2048 * i, 64, "R", issue_ns=i) for i, dev in enumerate(devs)]
        return r
    a = add(conn, reads(7, 7, 7, 9))
    b = add(conn, reads(7, 7, 9))            # the same disk (7) again: both vote
    assert current(conn) == [a, b]
    c = add(conn, reads(8, 8, 8, 9))         # most of it from 8, which neither read
    assert current(conn) == [c]
    d = add(conn, reads(9, 8))               # ties go to the lower device number: 8, which c read
    assert current(conn) == [c, d]


def test_a_re_recording_after_a_stale_schedule_replaces_the_old_ones(tmp_path):
    conn, app = open_db(tmp_path / "w.db"), App(tmp_path)
    a = add(conn, rec(app))
    app_id = get_app(conn, "app")["id"]
    conn.execute("INSERT INTO schedules(app_id, created_at, algorithm, probe, recording_ids, t_exp_s, total_bytes,"
                 " active, stale) VALUES (?, 0, 'ours', 'model', ?, 0.1, 1, 1, 1)", (app_id, json.dumps([a])))
    b = add(conn, rec(app))  # same files, but the schedule went stale: the learner re-recorded it
    assert current(conn) == [b]


def test_prune_and_forget(tmp_path):
    db = tmp_path / "w.db"
    conn, app = open_db(db), App(tmp_path)
    for i in range(5):
        if i == 2:
            app.upgrade(b"2")  # the library changed once (before recording 3): 1 and 2 are superseded
        add(conn, rec(app))
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
