"""The hook's accuracy feedback (warmstart/hook/feedback.py) on a real SQLite file: what is
judged, what is not, and what consecutive bad verdicts do with learn = off and auto."""

import pytest

from warmstart.db import open_db
from warmstart.db.launches import list_launches
from warmstart.hook import feedback
from warmstart.hook.config import HookConfig

MIB = 1 << 20


@pytest.fixture
def db(tmp_path):
    conn = open_db(tmp_path / "w.db")
    app = conn.execute("INSERT INTO apps(name, executable, argv_json, created_at) VALUES ('mail', ?, '[]', 0)",
                       (b"/usr/bin/mail",)).lastrowid
    sid = conn.execute("INSERT INTO schedules(app_id, created_at, algorithm, probe, recording_ids, t_exp_s,"
                       " total_bytes) VALUES (?, 0, 'ours', 'model', '[]', 0.5, ?)", (app, 20 * MIB)).lastrowid
    return conn, sid


def stats(inside, missed, fetched=20 * MIB, resident=0, evicted=0, exited=True):
    return {"engine": "readahead", "bytes_scheduled": 20 * MIB, "bytes_fetched": fetched, "bytes_resident": resident,
            "exit": {"asked": True, "exited": exited, "t_measured": 105.5, "scheduled_resident_bytes": inside,
                     "missed_bytes": missed, "files_checked": 9, "recently_evicted_pages": evicted}}


def event(sid):
    return {"event": "launch", "schedule_id": sid, "pid": 1, "t_exec": 105.0, "outcome": "ready"}


def stale(conn, sid):
    return conn.execute("SELECT stale FROM schedules WHERE id = ?", (sid,)).fetchone()[0] == 1


def test_a_good_launch_is_judged_with_its_exact_time(db):
    conn, sid = db
    lid, v = feedback.judge(conn, event(sid), stats(19 * MIB, 1 * MIB), HookConfig())
    assert v["judged"] and not v["bad"] and v["hit_ratio"] == pytest.approx(0.95)
    row = list_launches(conn, mode="hook")[0]
    assert row["launch_time_s"] == pytest.approx(0.5)  # exit (replayer's pidfd) - exec (daemon)


@pytest.mark.parametrize("s, why", [
    (stats(0, 0), "still cached"),                                     # dropped before the exit
    (stats(2 * MIB, 0), "still cached"),
    (stats(19 * MIB, MIB, evicted=4000), "evicted"),                   # memory pressure during it
    (stats(19 * MIB, MIB, fetched=2 * MIB, resident=18 * MIB), "warm"),
    ({"engine": "readahead", "bytes_scheduled": 1}, "no measurement"),
    (None, "no report"),
])
def test_launches_whose_cache_was_lost_are_not_judged(db, s, why):
    conn, sid = db
    cfg = HookConfig(stale_after_bad=1)
    _, v = feedback.judge(conn, event(sid), s, cfg)
    assert not v["judged"] and why in v["not_judged"] and v["action"] is None
    assert not stale(conn, sid)


def test_learn_off_keeps_prefetching_and_shows_degraded_after_three_bad(db):
    conn, sid = db
    cfg = HookConfig(learn="off")
    for i in range(3):
        assert not feedback.degraded(conn, cfg)
        _, v = feedback.judge(conn, event(sid), stats(8 * MIB, 12 * MIB, fetched=10 * MIB), cfg)
        assert v["bad"] and v["bad_streak"] == i + 1
        feedback.judge(conn, event(sid), stats(0, 0), cfg)  # not judged: neither resets nor counts
    assert v["action"] == "degraded" and not stale(conn, sid)
    assert "hit ratio 40%" in feedback.degraded(conn, cfg)["mail"]
    _, v = feedback.judge(conn, event(sid), stats(19 * MIB, MIB), cfg)  # a good one ends it
    assert not v["bad"] and feedback.degraded(conn, cfg) == {}


def test_learn_auto_relearns_only_after_consecutive_bad_verdicts(db):
    conn, sid = db
    cfg = HookConfig(learn="auto")
    bad = stats(8 * MIB, 12 * MIB, fetched=10 * MIB)
    for s in (bad, bad, stats(19 * MIB, MIB), bad, bad):
        feedback.judge(conn, event(sid), s, cfg)
        assert not stale(conn, sid)
    _, v = feedback.judge(conn, event(sid), bad, cfg)
    assert v["action"] == "relearn" and stale(conn, sid)


@pytest.mark.parametrize("missed, grew", [(4 * MIB + MIB // 2, True), (4 * MIB, False)])
def test_misses_that_grew_past_the_recent_median_are_a_bad_verdict(db, missed, grew):
    """docs/hook.md, "Bad": misses over 2x the median of the last 5 judged launches (+4 MiB) are
    bad even with the hit ratio above the threshold (19 MiB covered, 4.5 MiB missed: 81 %)."""
    conn, sid = db
    cfg = HookConfig()
    for _ in range(5):
        _, v = feedback.judge(conn, event(sid), stats(19 * MIB, MIB // 4), cfg)
        assert v["judged"] and not v["bad"], v
    _, v = feedback.judge(conn, event(sid), stats(19 * MIB, missed), cfg)
    assert v["judged"] and v["hit_ratio"] >= cfg.accuracy_threshold, v
    assert v["missed_baseline_bytes"] == MIB // 4
    assert v["bad"] is grew, v
    if grew:
        assert v["reason"] == f"misses grew to {missed} B (median before {MIB // 4} B)" and v["bad_streak"] == 1
