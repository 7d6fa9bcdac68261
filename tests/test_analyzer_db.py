"""Schedules and device profiles round-trip through a real SQLite file."""

import time

import pytest

from warmstart.db import open_db
from warmstart.db.schedules import list_schedules, load_active_schedule, save_schedule
from warmstart.model import Extent, Range, Schedule, ScheduledFile, Segment
from warmstart.errors import WarmstartError


def _app(conn, name="demo"):
    conn.execute("INSERT INTO apps (name, executable, argv_json, created_at) VALUES (?,?,?,?)",
                 (name, b"/usr/bin/demo", "[]", time.time()))


def _schedule(name="demo", t_exp=1.5):
    f = ScheduledFile(b"/lib/\xffodd-name.so", 2049, 12, 8192, 111, 222)
    seg1 = Segment(1, 1, 2, 0.2, 0.01, 8192, [Range(2049, 100, 8, 4096),  # metadata
                                              Range(2049, 800, 8, 4096, f, 0)])
    seg2 = Segment(2, 3, 3, 0.1, 0.02, 4096, [Range(2049, 808, 8, 4096, f, 4096, orig_pos=3)])
    return Schedule(None, name, "paper", "model", t_exp, 12288, 0, [1, 2], [seg1, seg2], [f],
                    {0: [Extent(0, 800 * 512, 8192)]}, params={"k": 1})


def test_schedule_round_trip_keeps_bytes_paths_and_order(db_path):
    conn = open_db(db_path)
    _app(conn)
    sid = save_schedule(conn, _schedule())
    got = load_active_schedule(open_db(db_path), "demo")
    assert got.id == sid and got.algorithm == "paper" and got.recording_ids == [1, 2]
    assert [s.idx for s in got.segments] == [1, 2]
    assert got.segments[0].ranges[0].is_metadata
    assert got.segments[0].ranges[1].file.path == b"/lib/\xffodd-name.so"
    assert got.segments[1].ranges[0].file_offset == 4096 and got.segments[1].ranges[0].orig_pos == 3
    assert got.extents[0][0].physical == 800 * 512
    assert got.to_json()["files"][0]["path"] == b"/lib/\xffodd-name.so".decode("utf-8", "surrogateescape")


def test_new_schedule_replaces_the_active_one(db_path):
    conn = open_db(db_path)
    _app(conn)
    save_schedule(conn, _schedule(t_exp=1.0))
    sid2 = save_schedule(conn, _schedule(t_exp=2.0))
    assert load_active_schedule(conn, "demo").id == sid2
    assert [r["active"] for r in list_schedules(conn, "demo")] == [0, 1]


def test_unknown_app_is_a_clear_error(db_path):
    conn = open_db(db_path)
    with pytest.raises(WarmstartError, match="record it first"):
        load_active_schedule(conn, "nope")


def test_app_without_schedule_gives_none(db_path):
    conn = open_db(db_path)
    _app(conn)
    assert load_active_schedule(conn, "demo") is None
