"""`warmstart bench` mechanics on a tiny input (1 repetition, the synthetic app): not performance.

It runs the real stack (emulated disk, record, analyze, replay) and checks what bench promises:
every mode measured and stored under one bench_id, the plain, paper's and our schedules used, the
lower bound computed, every launch checked against a plain run, the markdown written from it.
"""

import json
import os

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from conftest import have_fuse, have_loop, have_tracefs, require
from warmstart.bench import apps
from warmstart.cli import cli
from warmstart.db import open_db
from warmstart.db.schedules import load_schedule
from warmstart.hook.trial import WAIT_UNDERCOUNT
from warmstart.paths import find_helper
from warmstart.report import markdown

EXIT_SEEN_LATE_S = 0.02   # how much later than the bench's wait the replayer may see an exit


def test_an_emulated_disks_profile_is_measured_once_per_model(tmp_path, monkeypatch):
    """bench profiles the first disk of a model and stores that profile for every later disk of
    the same model (EmuDisk.model_key), on whatever loop device; --reprofile, another model or an
    unreadable kept profile measure again."""
    from types import SimpleNamespace
    from warmstart.analyzer import kept
    from warmstart.bench import matrix
    from warmstart.db.profiles import latest_profile
    from warmstart.model import DiskProfile
    measured, said = [], []

    def measure(dev):
        measured.append(dev)
        return DiskProfile(seek_curve=[(0.0, 0.002), (1e9, 0.012)], rate_curve=[(0.0, 1.2e8)], overhead_s=1e-4,
                           stream_bytes=65536.0, c_switch_s=0.009 + len(measured) / 1000, r_tr_Bps=1.2e8,
                           size_bytes=1 << 30, device=dev), 7.0
    monkeypatch.setattr(matrix, "measure", measure)
    monkeypatch.setenv("WARMSTART_PROFILE_CACHE", str(tmp_path / "profiles"))
    conn = open_db(tmp_path / "w.db")

    def dut(loop, key, fs_dev):
        emu = SimpleNamespace(loop_dev=loop, model_key=lambda: key)
        return SimpleNamespace(emu=emu, kind="hdd7200", fs_dev=fs_dev)

    first = matrix.ensure_profile(conn, dut("/dev/loop3", "k1", 1795), said.append)
    assert measured == ["/dev/loop3"] and first["cached"] is None
    again = matrix.ensure_profile(conn, dut("/dev/loop5", "k1", 1797), said.append)
    assert measured == ["/dev/loop3"] and again["cached"] == str(tmp_path / "profiles" / f"{kept.key_of({'emulated': 'k1'})}.json")
    assert again["measured_at"] == first["measured_at"] and "--reprofile" in said[-1]
    _, stored = latest_profile(conn, 1797)
    assert stored.device == "/dev/loop5" and stored.c_switch_s == latest_profile(conn, 1795)[1].c_switch_s
    matrix.ensure_profile(conn, dut("/dev/loop5", "k1", 1797), said.append, reprofile=True)
    matrix.ensure_profile(conn, dut("/dev/loop5", "k2", 1797), said.append)
    assert measured == ["/dev/loop3", "/dev/loop5", "/dev/loop5"]
    (tmp_path / "profiles" / f"{kept.key_of({'emulated': 'k2'})}.json").write_text("{")
    assert matrix.ensure_profile(conn, dut("/dev/loop6", "k2", 1798), said.append)["cached"] is None
    assert len(measured) == 4 and "unreadable" in said[-2]


def test_catalogue_and_app_parsing():
    cat = apps.catalogue()
    assert set(cat) == {"python", "gcc", "node", "synth", "perl", "git", "vim", "pycompile", "perlpod"}
    assert len(apps.PY_MODULES) >= 12 and cat["python"].argv[0] == "python3"
    assert cat["synth"].argv[1:] == apps.synth_plan(apps.FILES_DIR)  # deterministic plan
    extra = apps.parse_app("ls=ls -l '/usr/bin'")
    assert extra.argv == ["ls", "-l", "/usr/bin"] and not extra.builtin
    result = CliRunner().invoke(cli, ["bench", "--apps", "nosuch", "--reps", "1"])
    assert result.exit_code != 0 and "unknown bench app nosuch" in str(result.exception)


def test_bench_one_rep_synth(tmp_path):
    require(have_fuse() and have_loop() and have_tracefs(), "bench needs root, FUSE, loop devices and tracefs")
    require(find_helper("hddsim") and find_helper("warmstart-replay"),
            "run `make build` first (hddsim, warmstart-replay, warmstart-probe, synthlaunch)")
    db, md = tmp_path / "w.db", tmp_path / "bench.md"
    modes = "cold,reorder,reorder-ours,segmented-paper,segmented,warm"
    result = CliRunner().invoke(cli, ["--db", str(db), "bench", "--disk", "hdd7200", "--apps", "synth",
                                      "--reps", "1", "--modes", modes, "--markdown", str(md), "--json"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output + result.stderr
    doc = json.loads(result.stdout)
    conn = open_db(db)
    rows = conn.execute("SELECT l.mode, s.algorithm, l.exit_status, l.details_json FROM launches l"
                        " LEFT JOIN schedules s ON s.id = l.schedule_id WHERE l.bench_id = ?",
                        (doc["bench_id"],)).fetchall()
    got = sorted((r[0], r[1]) for r in rows)
    assert got == sorted([("cold", None), ("reorder", "reorder"), ("reorder", "optimal"), ("segmented", "paper"),
                          ("segmented", "optimal"), ("warm", None)]), got
    assert all(r[2] == 0 for r in rows) and doc["problems"] == []
    # Prefetching launches ran with the replayer; repetition 1 carries the timeline samples.
    for mode, _, _, details in rows:
        d = json.loads(details)
        assert d["timeline"]["disk"], mode
        # the sampler's block instance saw the launch's requests (their LBA dots); a warm launch
        # has none but for a page the kernel reclaimed since its warm-up: this machine's proactive
        # reclaimer (kdamond, README "Tests") takes pages of the emulated disk during this test,
        # and one CI run's warm launch read one request
        n = len(d["timeline"]["requests"])
        assert d["timeline"]["note"] is None and (n <= 2 if mode == "warm" else n > 0), (mode, d["timeline"]["note"], n)
        if mode != "cold" and mode != "warm":
            assert d["replay"]["bytes_fetched"] > 0, mode
    res = doc["results"]["synth"]
    # the lower bound: its parts measured in this run, never above a launch that prefetched or ran cold
    assert res["schedule_pass_s"] > 0 and res["raw_pass_s"] > 0 and res["cut_bound_s"] > 0
    warm = res["methods"]["warm"]["min"]   # a cut counts at most its fetch and then a warm launch
    assert res["bound_s"] == max(warm, res["schedule_pass_s"], min(res["cut_bound_s"], res["cut_fetch_s"] + warm))
    assert res["warm_or_raw_pass_s"] == max(res["methods"]["warm"]["median"], res["raw_pass_s"])
    assert res["t_exp_s"] > 0
    # (its warm part is a measured launch itself: compared with the others, it is the spread)
    from warmstart.analyzer.bound import launch_bound
    parts = launch_bound(res["cut_bound_s"], None, res["schedule_pass_s"])
    for mode in ("cold", "reorder", "reorder-ours", "segmented-paper", "segmented"):
        assert res["methods"][mode]["min"] >= parts - 0.002, (mode, res)
    assert res["segmented_vs_cold"] == res["methods"]["segmented"]["median"] / res["methods"]["cold"]["median"]
    # LB at each launch's own CPU (its CPU halves scaled by its CPU over the warm launch's): still
    # below every launch that prefetched (reorder, reorder-ours, segmented-paper, segmented)
    assert res["prefetched_min_vs_bound_at_cpu"] >= 0.98 and res["segmented_vs_bound_at_cpu"] >= 0.98, res
    text = md.read_text()
    assert "| seg/LB at its CPU |" in text and "| every prefetched launch ≥ 0.99 × its LB at its CPU" in text
    assert doc["bench_id"] in text and markdown.section(doc, doc["command"]) in text
    # The emulated disk is torn down afterwards (its state dir and tmpfs image are gone).
    from warmstart.emudisk import image
    from warmstart.emudisk.disk import STATE_ROOT
    name = f"bench-hdd7200-{os.getpid()}"
    assert not (STATE_ROOT / name).exists() and not (image.tmpfs_dir() / f"{name}.img").exists()


def test_bench_hook_mode_and_run_from_outside_on_the_random_layout(tmp_path):
    """hook: plain launches with warmstartd and its learner, each checked, timed and claimed from
    the learner's feedback, made after each repetition's other modes (not all after the matrix:
    a host slowing down during the run would slow them alone); every row carries the app's own
    CPU time; run-cli: `warmstart run` timed from outside; the random layout."""
    require(have_fuse() and have_loop() and have_tracefs(), "bench needs root, FUSE, loop devices and tracefs")
    from test_hook_daemon import have_fanotify_perm
    require(have_fanotify_perm(), "needs root and fanotify permission events")
    db, md = tmp_path / "w.db", tmp_path / "bench.md"
    result = CliRunner().invoke(cli, ["--db", str(db), "bench", "--disk", "hdd7200", "--layout", "random",
                                      "--apps", "synth", "--reps", "2", "--hook-launches", "3",
                                      "--modes", "cold,reorder-ours,run-cli,hook", "--no-timeline",
                                      "--markdown", str(md), "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output + result.stderr
    doc = json.loads(result.stdout)
    assert doc["disk"] == "hdd7200.random" and doc["layout"] == "random" and doc["problems"] == [], doc["problems"]
    conn = open_db(db)
    rows = conn.execute("SELECT mode, launch_time_s, details_json FROM launches WHERE bench_id = ? ORDER BY id",
                        (doc["bench_id"],)).fetchall()
    # repetition 1: its other modes, then 2 of the 3 hook launches; repetition 2: then the third
    assert [r[0] for r in rows] == ["cold", "reorder", "run-cli", "hook", "hook",
                                    "cold", "reorder", "run-cli", "hook"], [r[0] for r in rows]
    hooked = [json.loads(r[2]) for r in rows if r[0] == "hook"]
    assert len(hooked) == 3
    # the app's CPU (synth: 48 reads with 12 bursts of 5-20 ms of CPU between them), at most its wall time
    timed = [(json.loads(r[2]).get("bench") or json.loads(r[2]), r[1]) for r in rows if r[0] != "run-cli"]
    assert all(0.04 < (d["app_cpu_s"]) <= t for d, t in timed), timed
    # and the CPU time the hypervisor took from the machine meanwhile (0 on bare metal)
    assert all(d["host_steal_s"] is not None and 0 <= d["host_steal_s"] <= os.cpu_count() * t for d, t in timed), timed
    for d in hooked:  # the learner's row of that launch, claimed: its verdict and exact exec-to-exit time
        assert d["bench"]["outcome"] in ("ready", "deadline") and d["feedback"]["judged"] is not None
        # exec to exit, as the replayer saw the exit (its pidfd poll waking), within fork to exit as
        # the bench's wait saw it: up to a wake-up's latency later on a busy machine (0.4 ms seen)
        assert 0 < d["bench"]["exec_to_exit_s"] <= d["bench"]["outside_s"] + EXIT_SEEN_LATE_S, d["bench"]
    cli_runs = [json.loads(r[2]) for r in rows if r[0] == "run-cli"]
    assert len(cli_runs) == 2 and all(r["startup_overhead_s"] > 0 for r in cli_runs)
    assert set(doc["apps"]["synth"]["schedules"]) == {"ours"}   # no mode replays plain or paper: not analyzed
    res = doc["results"]["synth"]
    assert res["hook_vs_best_reorder"] > 0 and res["hook_outcomes"] and res["run_cli_overhead_s"] > 0
    assert "hook / best of reorder" in md.read_text()
    assert doc["hook"]["index_apps"] == ["synth-hdd7200.random"]
    # segmented or whole (hook/trial.py): the segmented schedule's first launch makes the schedule
    # fetched whole serve the second, whose launch settles it; the third is served by the one kept
    # (synth's 12 bursts of CPU between its reads segment its schedule); or, where its app waited
    # less than whole could have to save, it settles it alone and serves all three
    served = [r[0] for r in conn.execute("SELECT schedule_id FROM launches WHERE bench_id = ? AND mode = 'hook'"
                                         " ORDER BY id", (doc["bench_id"],))]
    first = load_schedule(conn, served[0])
    assert len(first.segments) >= 2 and "whole_of" not in first.params
    t = doc["hook"]["trials"]["synth-hdd7200.random"]
    if t["whole"] is None:
        assert t["state"] == "kept segmented" and t["waited_s"] / WAIT_UNDERCOUNT < t["margin_s"], t
        assert served == [t["segmented"]] * 3, (served, t)
    else:
        assert t["state"] in ("kept whole", "kept segmented") and (t["segmented"], t["whole"]) == tuple(served[:2]), t
        assert len(load_schedule(conn, served[1]).segments) == 1
        assert served[2] == (t["whole"] if t["state"] == "kept whole" else t["segmented"]), (served, t)
    assert f"segmented or whole (docs/hook.md): synth-hdd7200.random: {t['state']}" in md.read_text()


def test_hooked_launches_against_cold_raw_and_at_their_cpu():
    """Issue 22's "never slower than no prefetch" in the bench: the worst hooked launch over the
    cold median, and over the cold launches' median time off the CPU plus its own CPU time (a
    launch on a slow CPU is not a slow prefetch; one that waited longer than cold is, even when
    faster); the hooked launches in a row at the end slower than cold; the Targets rows, and the
    apps left prefetched after 3 of them (not degraded, still in the index)."""
    from warmstart.bench.matrix import _hook_vs_cold

    def row(method, t, cpu, steal=0.0):
        return {"method": method, "launch_time_s": t, "details": {"bench": {"app_cpu_s": cpu, "host_steal_s": steal}}}

    cold = [row("cold", 1.0, 0.8), row("cold", 1.1, 0.9), row("cold", 0.9, 0.7)]   # 0.2 s off the CPU each
    got = _hook_vs_cold(cold + [row("hook", 0.5, 0.2), row("hook", 1.2, 1.05, 0.3), row("hook", 0.6, 0.4)])
    assert got["hook_worst_vs_cold"] == pytest.approx(1.2)               # 1.2 s over the cold median 1.0
    assert got["hook_worst_steal_s"] == pytest.approx(0.3)               # the host's steal in that one
    assert got["hook_worst_vs_cold_at_cpu"] == pytest.approx(0.5 / 0.4)  # 0.3 s off the CPU, against 0.2
    assert got["hook_slow_at_end"] == 0
    slow = _hook_vs_cold(cold + [row("hook", 0.5, 0.2)] + [row("hook", 1.05, 0.85)] * 3)
    assert slow["hook_slow_at_end"] == 3 and slow["hook_worst_vs_cold_at_cpu"] == pytest.approx(1.25)
    assert _hook_vs_cold(cold)["hook_worst_vs_cold"] is None
    doc = {"disk": "ssd", "disk_kind": "ssd", "problems": [], "hook": {"index_apps": ["a-ssd"], "degraded": {}},
           "results": {"a": {"app": "a-ssd", **slow}, "b": {"app": "b-ssd", **got}}}
    assert markdown.left_in_path(doc) == ["a-ssd"]
    rows = {c: (v, ok) for c, v, ok in markdown.targets(doc)}
    assert rows["every hooked launch ≤ 1.02 × its app's cold median (the highest, every app)"] == \
        (pytest.approx(1.2), False)
    assert [v for c, v in rows.items() if c.startswith("apps still prefetched at the end")] == [(1, False)]
    for hook in ({"index_apps": ["a-ssd"], "degraded": {"a-ssd": "3 launches in a row not clearly faster"}},
                 {"index_apps": [], "degraded": {}}):
        assert markdown.left_in_path({**doc, "hook": hook}) == []


def test_bench_file_system_options():
    """--fs and --overlay: named in the disk label (ext4's unchanged), refused where they cannot apply."""
    from warmstart.bench.matrix import BenchConfig, _check_config
    from warmstart.errors import WarmstartError
    require(os.geteuid() == 0, "bench checks root first")
    assert BenchConfig().label == "hdd7200" and BenchConfig(layout="random").label == "hdd7200.random"
    assert BenchConfig(fs="xfs").label == "hdd7200.xfs"
    assert BenchConfig(disk="ssd", layout="random", fs="btrfs").label == "ssd.random.btrfs"
    result = CliRunner().invoke(cli, ["bench", "--help"])
    assert "--fs [ext4|xfs|btrfs]" in result.output and "--overlay" in result.output
    for cfg, words in ((BenchConfig(disk="real", fs="xfs"), "the real disk has its own file system"),
                       (BenchConfig(disk="real", overlay=True), "the real disk has its own file system"),
                       (BenchConfig(overlay=True, relocate=True), "cannot be combined with --unknown or --relocate"),
                       (BenchConfig(fs="zfs"), "unknown --fs 'zfs'")):
        try:
            _check_config(cfg)
        except WarmstartError as e:
            assert words in str(e), e
        else:
            raise AssertionError(f"{cfg} accepted")


def test_bench_on_xfs_with_an_overlay(tmp_path):
    """bench --fs xfs --overlay: the system image in XFS, every app also from an overlayfs over it;
    the file system in the run's label, JSON and markdown; each overlay launch compared with the
    same launch from XFS itself."""
    require(have_fuse() and have_loop() and have_tracefs(), "bench needs root, FUSE, loop devices and tracefs")
    db, md = tmp_path / "w.db", tmp_path / "bench.md"
    result = CliRunner().invoke(cli, ["--db", str(db), "bench", "--disk", "hdd7200", "--fs", "xfs", "--overlay",
                                      "--apps", "synth", "--reps", "1", "--modes", "cold,segmented",
                                      "--no-timeline", "--markdown", str(md), "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output + result.stderr
    doc = json.loads(result.stdout)
    assert doc["disk"] == "hdd7200.xfs" and doc["fs"] == "xfs" and doc["overlay"] and doc["problems"] == []
    assert doc["bench_id"].endswith("-hdd7200.xfs")
    assert sorted(doc["results"]) == ["synth", "synth@overlay"]
    over = doc["results"]["synth@overlay"]
    assert over["app"] == "synth@overlay-hdd7200.xfs" and set(over["overlay_vs_lower"]) == {"cold", "segmented"}
    assert over["overlay_vs_lower"]["cold"] == \
        over["methods"]["cold"]["median"] / doc["results"]["synth"]["methods"]["cold"]["median"]
    text = md.read_text()
    # its own section: a plain run of the same disk does not replace it
    assert "<!-- bench:matrix-hdd7200.xfs-overlay -->" in text and "- file system xfs" in text
    assert "APP@overlay ≤ 1.10 × the same launch from the lower file system" in text
    # the overlay went down with the disk
    mounts = open("/proc/self/mountinfo").read()
    assert f"bench-hdd7200-{os.getpid()}" not in mounts


def test_bench_names_the_file_system_as_mounted(emu_btrfs):
    """The JSON's fs comes from the mount: a btrfs subvolume's st_dev (0:N) is not its mount's."""
    from warmstart.bench.matrix import DiskUnderTest
    dut = DiskUnderTest("hdd7200", print, fs="btrfs")
    dut.emu = emu_btrfs
    assert dut.fstype() == "btrfs"


@given(st.integers(1, 50), st.integers(1, 12))
def test_hook_launches_spread_over_the_repetitions(total, reps):
    """Every hook launch is made once, in repetitions that differ by at most one launch, the
    earlier ones taking the extra."""
    from warmstart.bench.hookmode import launches_in_rep
    per = [launches_in_rep(total, reps, r) for r in range(reps)]
    assert sum(per) == total and max(per) - min(per) <= 1 and per == sorted(per, reverse=True)


def test_the_bench_analyzes_only_the_schedules_its_modes_replay():
    from warmstart.bench.matrix import schedule_kinds
    assert schedule_kinds(["cold", "reorder-ours", "segmented", "hook", "warm"]) == ["ours"]
    assert schedule_kinds(["interleave", "segmented-paper"]) == ["plain", "paper", "ours"]
    assert schedule_kinds(["reorder", "warm"]) == ["plain", "ours"]
