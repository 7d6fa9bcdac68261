"""`warmstart bench --unknown` mechanics (1 repetition, the synthetic app): not performance.

Checks that one bench run launches the app as never seen (no recording, no schedule), cold and
with each fallback mechanism, stores every launch, and that issue 7's numbers (ratios, accuracy,
waste, per-source pages, the chosen mechanism and the targets) are in the JSON and the markdown.
Whether the targets are met is for `warmstart bench --unknown --reps 5` to say.
"""

import json

from click.testing import CliRunner

from conftest import have_fuse, have_loop, have_tracefs, require
from warmstart.bench import unknown
from warmstart.cli import cli
from warmstart.db import open_db
from warmstart.paths import find_helper
from warmstart.report import markdown


def test_targets_choose_one_mechanism_for_all_apps():
    a = {"ratio": {"unknown-spec": 0.78, "unknown-online": 0.95, "unknown-both": 0.70}}
    b = {"ratio": {"unknown-spec": 0.90, "unknown-online": 0.97, "unknown-both": 1.10}}
    t = unknown.targets({"a": a, "b": b})
    # both has the lowest median but slows b down by 10 %: spec is chosen
    assert t["chosen"] == "spec"
    assert t["per_mechanism"]["both"]["worst_ratio"] == 1.10
    assert [x["met"] for x in t["targets"]] == [True, True]
    assert unknown.targets({})["chosen"] is None


def test_bench_unknown_one_rep(tmp_path):
    require(have_fuse() and have_loop() and have_tracefs(), "bench needs root, FUSE, loop devices and tracefs")
    require(find_helper("hddsim") and find_helper("ws-spec-run")
            and find_helper("synthlaunch"), "run `make build` first (hddsim, ws-spec-run, synthlaunch)")
    db, md = tmp_path / "w.db", tmp_path / "bench.md"
    result = CliRunner().invoke(cli, ["--db", str(db), "bench", "--disk", "hdd7200", "--apps", "synth",
                                      "--reps", "1", "--unknown", "--markdown", str(md), "--json"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output + result.stderr
    doc = json.loads(result.stdout)
    assert doc["problems"] == [] and doc["apps"]["synth"]["recorded"] == "never"

    conn = open_db(db)
    assert conn.execute("SELECT COUNT(*) FROM recordings").fetchone()[0] == 0
    assert conn.execute("SELECT COUNT(*) FROM schedules").fetchone()[0] == 0
    rows = conn.execute("SELECT l.mode, l.exit_status, l.launch_time_s, l.used_bytes, l.details_json FROM launches l"
                        " WHERE l.bench_id = ?", (doc["bench_id"],)).fetchall()
    assert sorted(r[0] for r in rows) == sorted(unknown.mode_of(m) for m in unknown.MECHS)
    for mode, status, t, used, details in rows:
        d = json.loads(details)
        assert status == 0 and t > 0 and used > 0, mode
        if mode == "unknown-spec":
            copy = d["copy"]
            # the copy was ended, nothing of it left alive; it ran the command (opened files) and
            # prefetched files unless its cost rule stopped it first for trailing the launch. With
            # one CPU kept busy it trailed synth in 6 of 6 runs, after ~20 opens and 1-2 data files;
            # two CI runs saw it stopped before its first open: it runs at idle priority, so on a
            # busy machine it may not reach CMD's first open within the 0.15 s grace. (Its init's
            # set-up read no longer counts as progress: test_speculate_safety's progress test.)
            assert copy["still_alive_after_kill"] == [], copy
            assert copy["totals"]["opens"] > 0 or copy["killed_reason"] == "not ahead", copy
            assert copy["prefetched_files"] > 0 or copy["killed_reason"] == "not ahead", copy
            assert (d["by_mechanism"]["speculation"]["prefetched_pages"] > 0) == (copy["prefetched_files"] > 0), d

    res = doc["unknown"]["results"]
    a = res["apps"]["synth"]
    assert set(a["times"]) == {"unknown-cold", "unknown-spec", "unknown-online", "unknown-both"}
    for mode in ("unknown-spec", "unknown-online", "unknown-both"):
        assert a["ratio"][mode] > 0 and mode in a["accuracy"] and mode in a["waste"]
    assert a["accuracy"]["unknown-spec"] is not None and a["waste"]["unknown-spec"] is not None
    assert res["chosen"] in ("spec", "online", "both")
    assert len(res["targets"]) == 2 and all(t["measured"] is not None for t in res["targets"])
    text = md.read_text()
    assert "## Apps never recorded" in text and "Mechanism chosen once" in text
    assert markdown.section(doc, doc["command"]) in text
