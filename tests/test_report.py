"""`warmstart report`: table math against rows in a real SQLite file, figures, the HTML page."""

import base64
import json
import re
import statistics
import time

import pytest
from click.testing import CliRunner

from warmstart.cli import cli
from warmstart.db import open_db
from warmstart.report import stats

NOW = time.time()
TIMES = {  # app -> method -> launch times (s)
    "pyimport": {"cold": [3.0, 3.4, 3.2], "interleave": [2.9, 3.1, 3.0], "reorder": [0.9, 1.0, 0.95],
                 "segmented-paper": [0.85, 0.9, 0.8], "segmented": [0.7, 0.75, 0.8], "warm": [0.2, 0.21, 0.19]},
    "gcc": {"cold": [1.0, 1.2], "segmented": [0.5, 0.6], "warm": [0.1, 0.1]},
}


def fill(conn):
    """Apps, a recording with requests, two schedules and the launches of TIMES, by plain SQL."""
    ids = {}
    for app in TIMES:
        ids[app] = conn.execute("INSERT INTO apps(name, executable, argv_json, created_at) VALUES (?, ?, '[]', ?)",
                                (app, b"/usr/bin/" + app.encode(), NOW - 86400 * 3)).lastrowid
    rec = conn.execute("INSERT INTO recordings(app_id, started_at, launch_time_s, end_reason, backend, cold_method)"
                       " VALUES (?, ?, 3.1, 'exit', 'tracefs', 'drop_caches')", (ids["pyimport"], NOW - 86400 * 2)).lastrowid
    for seq in range(50):  # a seeking launch: alternating far and near LBAs, 10 ms requests
        conn.execute("INSERT INTO block_requests(recording_id, seq, dev, sector, nr_sectors, rwbs, is_write,"
                     " is_readahead, is_meta, issue_ns, complete_ns, cpu_before_ns) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                     (rec, seq, 1792, (seq % 2) * 10_000_000 + seq * 1000, 256, "R", 0, 0, 0,
                      seq * 60_000_000, seq * 60_000_000 + 10_000_000, 40_000_000))
    sched = {}
    for app, alg, t_exp, age in (("pyimport", "paper", 0.8, 2), ("pyimport", "ours", 0.70, 1), ("gcc", "ours", 0.5, 0.5)):
        sched[(app, alg)] = conn.execute(
            "INSERT INTO schedules(app_id, created_at, algorithm, probe, recording_ids, t_exp_s, total_bytes, stale)"
            " VALUES (?, ?, ?, 'disk', '[1]', ?, 1000, ?)",
            (ids[app], NOW - 86400 * age, alg, t_exp, 1 if app == "gcc" else 0)).lastrowid
    t = NOW - 3600
    for app, methods in TIMES.items():
        for method, values in methods.items():
            for i, v in enumerate(values):
                mode = "segmented" if method.startswith("segmented") else method
                sid = sched.get((app, "paper" if method == "segmented-paper" else "ours")) if mode == "segmented" else None
                pref = 100 << 20 if sid else None
                conn.execute(
                    "INSERT INTO launches(app_id, schedule_id, bench_id, mode, mechanism, disk, started_at,"
                    " launch_time_s, exit_status, prefetched_bytes, used_bytes, prefetched_used_bytes)"
                    " VALUES (?,?,?,?,?,?,?,?,0,?,?,?)",
                    (ids[app], sid, "b1", mode, "readahead" if sid else None, "hdd7200", t, v,
                     pref, 90 << 20 if sid else None, 80 << 20 if sid else None))
                t += 10
    # A failed launch and one the runner could not prefetch must not count towards the times.
    conn.execute("INSERT INTO launches(app_id, mode, disk, started_at, launch_time_s, exit_status, bench_id)"
                 " VALUES (?, 'segmented', 'hdd7200', ?, 0.001, 1, 'b1')", (ids["gcc"], t))
    conn.execute("INSERT INTO launches(app_id, mode, disk, started_at, launch_time_s, exit_status, bench_id,"
                 " details_json) VALUES (?, 'segmented', 'hdd7200', ?, 0.002, 0, 'b1', ?)",
                 (ids["gcc"], t + 1, '{"notes": ["prefetch failed, launched without it: refused"]}'))
    return ids


def run(db_path, *args):
    result = CliRunner().invoke(cli, ["--db", str(db_path), "report", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout  # the progress bar goes to stderr


def test_stats_functions():
    s = stats.spread([3.0, 1.0, 2.0, 10.0])
    assert (s.n, s.median, s.min, s.max) == (4, 2.5, 1.0, 10.0)
    assert stats.spread([]) is None
    assert stats.gain(1.0, 4.0) == pytest.approx(0.75)
    assert stats.captured(4.0, 1.0, 0.5) == pytest.approx(3.0 / 3.5)
    assert stats.captured(1.0, 1.0, 1.0) is None
    assert stats.warm_or_raw_pass(0.3, 1.2) == 1.2 and stats.warm_or_raw_pass(0.3, None) == 0.3
    assert stats.estimate_error(1.1, 1.0) == pytest.approx(0.1)


def test_json_numbers_match_the_database(db_path):
    conn = open_db(db_path)
    fill(conn)
    doc = json.loads(run(db_path, "--json"))
    by_app = {a["app"]: a for a in doc["apps"]}
    py = by_app["pyimport"]
    # Recompute from the DB with plain SQL, independently of the report code.
    def med(app, mode, alg=None):
        q = ("SELECT l.launch_time_s FROM launches l JOIN apps a ON a.id=l.app_id LEFT JOIN schedules s"
             " ON s.id=l.schedule_id WHERE a.name=? AND l.mode=? AND l.exit_status=0")
        args = [app, mode]
        if alg:
            q += " AND s.algorithm=?"
            args.append(alg)
        return statistics.median(r[0] for r in conn.execute(q, args))
    cold, seg, warm = med("pyimport", "cold"), med("pyimport", "segmented", "ours"), med("pyimport", "warm")
    assert py["prefetch_method"] == "segmented"
    assert py["cold"]["median"] == pytest.approx(cold)
    assert py["prefetched"]["median"] == pytest.approx(seg)
    assert py["gain"] == pytest.approx(1 - seg / cold)
    assert py["captured"] == pytest.approx((cold - seg) / (cold - warm))
    assert py["methods"]["segmented-paper"]["median"] == pytest.approx(med("pyimport", "segmented", "paper"))
    assert py["methods"]["reorder"]["ratio_to_cold"] == pytest.approx(med("pyimport", "reorder") / cold)
    assert py["t_exp_s"] == 0.70 and py["t_exp_error"] == pytest.approx(seg / 0.70 - 1)
    assert py["accuracy"] == pytest.approx(80 / 90) and py["waste"] == pytest.approx(20 / 100)
    # created NOW - 1 day, NOW taken when this module was collected (minutes ago in a full run)
    assert py["schedule_age_s"] == pytest.approx(time.time() - (NOW - 86400), abs=60) and py["schedule_stale"] is False
    gcc = by_app["gcc"]
    assert gcc["failed_launches"] == 2 and gcc["prefetched"]["min"] == 0.5  # 0.001 and 0.002 s are out
    assert gcc["schedule_stale"] is True and gcc["methods"].get("reorder") is None


def test_table_text_shows_db_numbers_within_80_columns(db_path):
    conn = open_db(db_path)
    fill(conn)
    out = run(db_path)
    assert max(len(line) for line in out.splitlines()) <= 80
    line = next(x for x in out.splitlines() if x.startswith("pyimport ") and "hdd7200" in x)
    # cold median 3.2 (range 3.0..3.4 -> ±6%), segmented 0.75, warm 0.2, gain 1-0.75/3.2 = 77%, capt 2.45/3.0 = 82%
    assert re.search(r"3\.200 ±6%\s+0\.750 ±7%\s+0\.200 ±5%\s+77%\s+82%", line), line
    ratios = [x for x in out.splitlines() if x.startswith("pyimport ")][-1]
    assert ratios.split()[1:] == ["1.00", "0.94", "0.30", "0.27", "0.23", "0.06"]
    assert "yes" in next(x for x in out.splitlines() if x.startswith("gcc ") and "seg" in x)


def test_filters_and_unknown_app(db_path):
    conn = open_db(db_path)
    fill(conn)
    doc = json.loads(run(db_path, "gcc", "--json"))
    assert [a["app"] for a in doc["apps"]] == ["gcc"]
    assert json.loads(run(db_path, "--disk", "ssd", "--json"))["apps"] == []
    assert json.loads(run(db_path, "--bench", "latest", "--json"))["filters"]["bench_id"] == "b1"
    result = CliRunner().invoke(cli, ["--db", str(db_path), "report", "nosuchapp"])
    assert result.exit_code != 0 and "no app named nosuchapp" in str(result.exception)


def _nonblank(png_path):
    """The PNG has real content: many distinct gray levels and a large pixel variance."""
    import matplotlib.image as mpimg
    import numpy as np
    img = mpimg.imread(png_path)
    gray = img[..., :3].mean(axis=2)
    return float(gray.var()) > 0.005 and len(np.unique(np.round(gray, 2))) > 10


def test_figures_render_and_html_embeds_them(db_path, tmp_path):
    conn = open_db(db_path)
    fill(conn)
    plots, page = tmp_path / "figs", tmp_path / "r.html"
    doc = json.loads(run(db_path, "--json", "--plot", str(plots), "--html", str(page)))
    figs = doc["figures"]
    names = sorted(p.name for p in plots.iterdir())
    assert "normalised.png" in names and "normalised.svg" in names and "history.png" in names
    assert "timeline-pyimport-hdd7200.png" in names  # cold panel from the recording
    for f in figs:
        assert _nonblank(f["png"]), f
        assert "<svg" in open(f["svg"]).read(1000)
    html = page.read_text()
    embedded = re.findall(r'src="data:image/png;base64,([^"]+)"', html)
    assert len(embedded) == len(figs) >= 3
    assert base64.b64decode(embedded[0]) == open(figs[0]["png"], "rb").read()
    assert "3.200 ±6%" in html and "src=\"http" not in html


def test_empty_database_says_what_to_do(db_path):
    out = run(db_path)
    assert "warmstart bench" in out


def test_everyday_use_is_reported_against_the_recorded_cold_launch(db_path):
    """record + plain hooked launches, no bench: the recordings (cold, caches dropped) are the
    cold reference, the disk is named after the device they read from, the gain is shown."""
    conn = open_db(db_path)
    # the launcher (env, chroot) read a little from the host disk: the label is the disk read most
    env = json.dumps({"devices": [{"dev": 64768, "name": "vda", "rotational": True},
                                  {"dev": 1795, "name": "loop3", "rotational": True}]})
    app = conn.execute("INSERT INTO apps(name, executable, argv_json, created_at) VALUES ('mail', ?, '[]', ?)",
                       (b"/usr/bin/mail", NOW - 600)).lastrowid
    other = conn.execute("INSERT INTO apps(name, executable, argv_json, created_at) VALUES ('fresh', ?, '[]', ?)",
                         (b"/usr/bin/fresh", NOW - 600)).lastrowid
    for a, t, cold_method in ((app, 2.0, "drop_caches"), (app, 2.4, "drop_caches"), (app, 0.3, "none"),
                              (other, 1.5, "drop_caches")):
        rid = conn.execute("INSERT INTO recordings(app_id, started_at, launch_time_s, end_reason, backend,"
                           " cold_method, env_json) VALUES (?, ?, ?, 'exit', 'tracefs', ?, ?)",
                           (a, NOW - 500, t, cold_method, env)).lastrowid
        for seq, dev in enumerate((64768, 1795, 1795)):
            conn.execute("INSERT INTO block_requests(recording_id, seq, dev, sector, nr_sectors, rwbs, is_write,"
                         " is_readahead, is_meta, issue_ns) VALUES (?, ?, ?, 8, 8, 'R', 0, 0, 0, 1)", (rid, seq, dev))
    for t in (0.5, 0.55, 0.6):  # hooked launches store no disk name
        conn.execute("INSERT INTO launches(app_id, mode, started_at, launch_time_s, exit_status)"
                     " VALUES (?, 'hook', ?, ?, 0)", (app, NOW - 100, t))
    doc = json.loads(run(db_path, "--json"))
    by_app = {s["app"]: s for s in doc["apps"]}
    mail = by_app["mail"]
    assert mail["disk"] == "loop3 hdd"
    assert mail["cold"]["median"] == 2.2  # the two cold recordings; the one without dropped caches is not cold
    assert mail["prefetched"]["median"] == 0.55 and mail["prefetch_method"] == "hook"
    assert mail["gain"] == pytest.approx(1 - 0.55 / 2.2)
    assert "tracing overhead" in mail["cold_source"]
    assert by_app["fresh"]["cold"]["median"] == 1.5 and by_app["fresh"]["prefetched"] is None
    text = run(db_path)
    assert "loop3 hdd" in text and "2.200 ±9%*" in text and "75%" in text and "cold*:" in text


def test_lower_bound_from_the_bench_runs_own_parts(db_path, tmp_path):
    """A bench stores its lower bound's parts beside its raw sorted pass; the report's LB is
    analyzer.bound.launch_bound(cut bound, that run's warm median, the schedule's pass), shown in
    the JSON, the table and as a mark on the normalised figure; a pass of another bench run (even a
    later one) is never attached, and the old max(warm, raw pass) is reported under its own name."""
    from warmstart.db.launches import insert_sorted_pass
    conn = open_db(db_path)
    ids = fill(conn)
    plain = json.loads(run(db_path, "--json"))
    assert all(a["bound_s"] is None for a in plain["apps"])   # nothing measured: no LB
    insert_sorted_pass(conn, app_id=ids["pyimport"], seconds=0.4, nbytes=10 << 20, ranges=40, disk="hdd7200",
                       bench_id="b1", schedule_pass_s=0.35, cut_bound_s=0.95)
    insert_sorted_pass(conn, app_id=ids["gcc"], seconds=0.05, nbytes=1 << 20, ranges=4, disk="hdd7200",
                       bench_id="b1", schedule_pass_s=0.04, cut_bound_s=0.08)
    # another run's, measured later: not these launches' bound
    insert_sorted_pass(conn, app_id=ids["pyimport"], seconds=9.0, nbytes=10 << 20, ranges=40, disk="hdd7200",
                       bench_id="b0", schedule_pass_s=9.0, cut_bound_s=9.0)
    insert_sorted_pass(conn, app_id=ids["gcc"], seconds=0.3, nbytes=1 << 20, ranges=4, disk="ssd", bench_id="b1")
    doc = json.loads(run(db_path, "--json", "--plot", str(tmp_path / "figs")))
    by_app = {a["app"]: a for a in doc["apps"]}
    py, gcc = by_app["pyimport"], by_app["gcc"]
    assert py["bound_s"] == 0.95 and py["cut_bound_s"] == 0.95 and py["schedule_pass_s"] == 0.35
    assert py["raw_pass_s"] == 0.4 and py["warm_or_raw_pass_s"] == 0.4
    assert gcc["bound_s"] == 0.1 and gcc["warm_or_raw_pass_s"] == 0.1   # warm (0.1 s) is the largest part
    assert "0.950" in run(db_path)
    svg = (tmp_path / "figs" / "normalised.svg").read_text()
    assert "lower bound (LB)" in svg and "thick line: LB" in svg
    only_b0 = json.loads(run(db_path, "--json", "--bench", "b0"))
    assert not only_b0["apps"]   # b0 has no launches: its pass alone makes no row
    # with its schedule's cut known by halves, a cut counts at most its fetch and then a warm launch
    sid = conn.execute("SELECT id FROM schedules WHERE app_id = ? AND algorithm = 'ours'", (ids["pyimport"],)).fetchone()[0]
    conn.execute("UPDATE schedules SET params_json = ? WHERE id = ?", (json.dumps({"bound": {"fetch_s": 0.5}}), sid))
    insert_sorted_pass(conn, app_id=ids["pyimport"], seconds=0.4, nbytes=10 << 20, ranges=40, disk="hdd7200",
                       bench_id="b1", schedule_id=sid, schedule_pass_s=0.35, cut_bound_s=0.95)
    conn.commit()
    py = {a["app"]: a for a in json.loads(run(db_path, "--json"))["apps"]}["pyimport"]
    assert py["bound_s"] == pytest.approx(0.5 + 0.19) and py["cut_bound_s"] == 0.95


def test_history_marks_the_launches_the_feedback_judged_bad(db_path, tmp_path):
    conn = open_db(db_path)
    ids = fill(conn)
    for k, (bad, t) in enumerate(((False, 0.6), (True, 1.9), (True, 2.0))):
        conn.execute("INSERT INTO launches(app_id, mode, started_at, launch_time_s, exit_status, details_json)"
                     " VALUES (?, 'hook', ?, ?, 0, ?)",
                     (ids["gcc"], NOW - 60 + k, t, json.dumps({"feedback": {"judged": True, "bad": bad}})))
    run(db_path, "--plot", str(tmp_path / "figs"))
    svg = (tmp_path / "figs" / "history.svg").read_text()
    assert "bad verdict (feedback)" in svg and "x: the feedback judged the launch bad" in svg
    conn.execute("DELETE FROM launches WHERE mode = 'hook'")
    run(db_path, "--plot", str(tmp_path / "figs2"))
    assert "judged the launch bad" not in (tmp_path / "figs2" / "history.svg").read_text()  # only when some were


def test_history_marks_stale_schedules_and_degraded_apps(db_path, tmp_path):
    from warmstart.db.schedules import mark_stale, stale_marks
    from warmstart.hook.config import HookConfig
    from warmstart.hook.feedback import judge
    conn = open_db(db_path)
    ids = fill(conn)
    sid = conn.execute("SELECT id FROM schedules WHERE app_id = ?", (ids["gcc"],)).fetchone()[0]
    run(db_path, "--plot", str(tmp_path / "before"))
    svg = (tmp_path / "before" / "history.svg").read_text()
    assert "went stale" not in svg and "degraded from here" not in svg
    # learn = off: three bad verdicts in a row (hit ratio 10%) make the app degraded, still
    # prefetched (the launches, 0.5 s, clearly faster than its cold ones, 1.0 and 1.2 s)
    mib = 1 << 20
    stats = {"bytes_scheduled": 10 * mib, "bytes_fetched": 10 * mib, "bytes_resident": 0,
             "exit": {"asked": True, "exited": True, "t_measured": 1.5, "files_checked": 3,
                      "scheduled_resident_bytes": 6 * mib, "missed_bytes": 54 * mib}}
    verdicts = [judge(conn, {"schedule_id": sid, "t_exec": 1.0}, stats, HookConfig(learn="off"))[1]
                for _ in range(3)]
    assert [v["action"] for v in verdicts] == [None, None, "degraded"], verdicts
    mark_stale(conn, sid, reason="a scheduled file changed (warmstartd)", at=NOW - 30)
    mark_stale(conn, sid, reason="later: kept the first", at=NOW)
    assert stale_marks(conn, "gcc") == [(NOW - 30, "a scheduled file changed (warmstartd)")]
    text = run(db_path)
    assert "stale: gcc: a scheduled file changed (warmstartd)" in text
    run(db_path, "--plot", str(tmp_path / "after"))
    svg = (tmp_path / "after" / "history.svg").read_text()
    assert "went stale (not prefetched until re-learned)" in svg and "dotted: its schedule went stale" in svg
    assert "degraded from here (kept)" in svg and "diamond: shown degraded, still prefetched" in svg


def test_launches_without_an_exact_time_are_not_timed_in_table_json_and_history(db_path, tmp_path):
    """Hooked launches the replayer could not time (the app still ran when it stopped waiting) are
    stored with no time and the reason: the medians and the gain are those of the timed launches,
    the table says how many were not timed and why, the history figure marks them apart."""
    from warmstart.db.launches import insert_launch
    conn = open_db(db_path)
    app = conn.execute("INSERT INTO apps(name, executable, argv_json, created_at) VALUES ('mail', ?, '[]', ?)",
                       (b"/usr/bin/mail", NOW - 600)).lastrowid
    conn.execute("INSERT INTO recordings(app_id, started_at, launch_time_s, end_reason, backend, cold_method)"
                 " VALUES (?, ?, 2.0, 'exit', 'tracefs', 'drop_caches')", (app, NOW - 500))
    why = "the app was still running when the replayer stopped waiting for its exit (a long-running app)"
    for k, t in enumerate((0.5, None, 0.6, None)):
        insert_launch(conn, app_id=app, mode="hook", launch_time_s=t, exit_status=0, started_at=NOW - 100 + k,
                      details={} if t else {"not_timed": why})
    # a database an older warmstart wrote: its -1 s placeholder becomes "not timed" on migration
    conn.execute("INSERT INTO launches(app_id, mode, started_at, launch_time_s, exit_status, details_json)"
                 " VALUES (?, 'hook', ?, NULL, 0, ?)", (app, NOW - 50, json.dumps({"not_timed": "older"})))
    doc = json.loads(run(db_path, "--json", "--plot", str(tmp_path / "figs")))
    [mail] = doc["apps"]
    assert mail["prefetched"]["n"] == 2 and mail["prefetched"]["median"] == pytest.approx(0.55), mail
    assert mail["prefetched"]["min"] == 0.5 and mail["gain"] == pytest.approx(1 - 0.55 / 2.0), mail
    assert mail["launches"] == 5 and mail["not_timed"] == 3 and mail["not_timed_reason"] == "older", mail
    text = run(db_path)
    assert "not timed: mail: 3 launch(es) without an exact time" in text, text
    svg = (tmp_path / "figs" / "history.svg").read_text()
    assert "not timed (no exact time)" in svg and "3 launch(es) not timed, left out" in svg
    with pytest.raises(ValueError, match="not_timed"):
        insert_launch(conn, app_id=app, mode="hook", launch_time_s=None)   # no reason: refused
    with pytest.raises(ValueError, match="not a time"):
        insert_launch(conn, app_id=app, mode="hook", launch_time_s=-1.0)   # the old placeholder


def test_migration_turns_old_placeholder_times_into_not_timed(tmp_path):
    """A database written before launch times could be unknown: its hooked launches stored as
    -1 s become NULL with the reason, their coverage columns (not pages used) are emptied, and
    the other launches are kept as they were."""
    import sqlite3
    from warmstart.db.schema import MIGRATIONS
    path = tmp_path / "old.db"
    old = sqlite3.connect(path)
    n = next(i for i, (name, _) in enumerate(MIGRATIONS, start=1) if name == "launch times may be unknown")
    for name, step in MIGRATIONS[:n - 1]:
        if callable(step):
            step(old)
        else:
            old.executescript(step)
    old.execute(f"PRAGMA user_version = {n - 1}")
    old.execute("PRAGMA application_id = 1465011539")
    app = old.execute("INSERT INTO apps(name, executable, argv_json, created_at) VALUES ('a', x'2f61', '[]', 0)"
                      ).lastrowid
    old.execute("INSERT INTO launches(app_id, mode, started_at, launch_time_s, used_bytes, prefetched_used_bytes,"
                " details_json) VALUES (?, 'hook', 1, -1.0, 9, 8, '{\"feedback\": {}}')", (app,))
    old.execute("INSERT INTO launches(app_id, mode, started_at, launch_time_s, used_bytes, prefetched_used_bytes)"
                " VALUES (?, 'segmented', 2, 0.7, 90, 80)", (app,))
    old.commit()
    old.close()
    conn = open_db(path)
    rows = [dict(r) for r in conn.execute("SELECT * FROM launches ORDER BY id")]
    assert rows[0]["launch_time_s"] is None and rows[0]["used_bytes"] is None and rows[0]["prefetched_used_bytes"] is None
    assert "older warmstart" in json.loads(rows[0]["details_json"])["not_timed"]
    assert "feedback" in json.loads(rows[0]["details_json"])
    assert (rows[1]["launch_time_s"], rows[1]["used_bytes"], rows[1]["prefetched_used_bytes"]) == (0.7, 90, 80)
    with pytest.raises(sqlite3.IntegrityError):
        conn.execute("INSERT INTO launches(app_id, mode, started_at, launch_time_s) VALUES (?, 'hook', 3, -1.0)", (app,))
