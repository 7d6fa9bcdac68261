"""`warmstart bench --relocate` mechanics (1 repetition, the synthetic app and `ls`): not performance.

Checks that one bench run measures before, relocates on its own emulated disk, re-analyzes, measures
again, and that issue 9's numbers (ratios, seeks before/after, targets) are in the JSON and the
markdown. Whether the targets are met is for `warmstart bench --relocate` to say, not this test.
"""

import json

import pytest

from click.testing import CliRunner

from conftest import have_fuse, have_loop, have_tracefs, require
from warmstart.bench import relocation
from warmstart.cli import cli
from warmstart.db import open_db
from warmstart.paths import find_helper
from warmstart.report import markdown


def test_targets_from_per_app_numbers():
    a = {"seg_after_vs_reorder_before": 0.4, "seg_after_vs_seg_before": 0.5, "seg_one_vs_seg_before": 1.02,
         "seek_drop_segmented": relocation._drop(120, 10)}
    b = dict(a, seg_after_vs_reorder_before=0.7, seek_drop_segmented=relocation._drop(40, 0),
             seg_one_vs_seg_before=None)
    t = {x["criterion"].split(":")[0]: x for x in relocation.targets({"a": a, "b": b})}
    assert t["segmented after ≤ 0.5 × reorder before (median over apps)"]["measured"] == pytest.approx(0.55)
    assert t["seeks drop ≥ 5× for every app (smallest drop)"]["measured"] == 12.0   # 0 seeks after counts as 1
    assert t["relocating one"]["measured"] == 1.02 and t["relocating one"]["met"] is True
    assert relocation._drop(None, 3) is None


def test_bench_relocate_one_rep(tmp_path):
    require(have_fuse() and have_loop() and have_tracefs(), "bench needs root, FUSE, loop devices and tracefs")
    require(find_helper("hddsim") and find_helper("warmstart-replay"),
            "run `make build` first (hddsim, warmstart-replay, warmstart-probe, synthlaunch)")
    db, md = tmp_path / "w.db", tmp_path / "bench.md"
    result = CliRunner().invoke(cli, ["--db", str(db), "bench", "--disk", "hdd7200", "--apps", "synth",
                                      "--app", "ls=ls -lR /usr/lib/python3", "--reps", "1",
                                      "--modes", "cold,reorder,segmented", "--relocate", "--relocate-one", "synth",
                                      "--markdown", str(md), "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output + result.stderr
    doc = json.loads(result.stdout)
    assert doc["problems"] == []
    rel = doc["relocation"]
    one, every = rel["steps"]
    assert one["step"] == "one" and one["apps"] == ["synth-hdd7200"] and one["moved_files"] > 0
    assert every["step"] == "all" and sorted(every["apps"]) == ["ls-hdd7200", "synth-hdd7200"]
    assert every["moved_bytes"] > 0 and every["relocation_id"]
    # The schedules measured after are the re-analyzed ones, not those measured before.
    for app in ("synth", "ls"):
        assert every["schedules"][app]["id"] != doc["apps"][app]["schedules"]["ours"]

    conn = open_db(db)
    rows = conn.execute("SELECT a.name, l.mode, l.schedule_id, l.details_json FROM launches l"
                        " JOIN apps a ON a.id = l.app_id WHERE l.bench_id = ?", (doc["bench_id"],)).fetchall()
    got = sorted((r[0], r[1]) for r in rows)
    expect = [(f"{a}-hdd7200", m) for a in ("ls", "synth") for m in
              ("cold", "reorder", "segmented", "reorder-relocated", "segmented-relocated")]
    expect.append(("ls-hdd7200", "segmented-one-relocated"))   # synth was the one relocated
    assert got == sorted(expect), got
    for name, mode, sid, details in rows:
        d = json.loads(details)
        assert isinstance(d["disk_stats"]["seeks"], int) and d["disk_stats"]["reads"] > 0, (name, mode)
        if mode.endswith("relocated"):
            assert sid == every["schedules"][name.split("-")[0]]["id"] or mode == "segmented-one-relocated"
            assert d["replay"]["bytes_fetched"] > 0, (name, mode)
    # The schedules after still fetch into the files' page cache (not raw reads of the blocks'
    # old, freed places, as the analyzer's re-run on pre-move LBAs produced), and every page the
    # recorded launch brought in that the schedule before fetched (the gap pages each merge read
    # through are no launch's, and the re-analysis on the new layout merges other gaps).
    file_ranges = ("SELECT f.path, r.file_offset, r.length FROM schedule_ranges r JOIN schedule_files f"
                   " ON f.schedule_id = r.schedule_id AND f.file_no = r.file_no WHERE r.schedule_id = ?")
    for app in ("synth", "ls"):
        before = _pages(conn, file_ranges, doc["apps"][app]["schedules"]["ours"])
        after = _pages(conn, file_ranges, every["schedules"][app]["id"])
        launch = _pages(conn, "SELECT f.path, a.first_index * 4096, a.nr_pages * 4096 FROM page_cache_adds a"
                              " JOIN recording_files f ON f.recording_id = a.recording_id AND f.dev = a.dev"
                              " AND f.ino = a.ino JOIN recordings r ON r.id = a.recording_id"
                              " JOIN apps p ON p.id = r.app_id WHERE p.name = ? AND f.path IS NOT NULL",
                        f"{app}-hdd7200")
        needed = before & launch
        assert len(needed) > 10 and needed <= after, (app, len(needed), sorted(needed - after)[:5])

    res = rel["results"]
    for app in ("synth", "ls"):
        a = res["apps"][app]
        for key in ("seg_after_vs_reorder_before", "seg_after_vs_seg_before", "seek_drop_segmented"):
            assert a[key] is not None and a[key] > 0, (app, key)
        assert set(a["seeks"]) >= {"cold", "reorder", "segmented", "segmented-relocated"}
    assert res["apps"]["ls"]["seg_one_vs_seg_before"] > 0 and res["apps"]["synth"]["seg_one_vs_seg_before"] is None
    assert len(res["targets"]) == 5 and all(t["measured"] is not None for t in res["targets"])
    text = md.read_text()
    assert "### Relocation (issue 9)" in text and markdown.section(doc, doc["command"]) in text


def _pages(conn, sql, arg):
    """{(path, page index)} of the (path, byte offset, length) rows of sql."""
    return {(bytes(path), page) for path, off, length in conn.execute(sql, (arg,))
            for page in range(off // 4096, (off + length + 4095) // 4096)}
