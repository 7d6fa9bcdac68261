"""`warmstart run` and run_launch(): the app's output and exit status pass through unchanged,
the launch is stored, and a missing schedule or app never stops the launch."""

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO, have_loop, require
from replay_helpers import cached_pages, evict, file_range, make_app, save, scheduled_file
from warmstart.db import open_db
from warmstart.db.launches import list_launches
from warmstart.replay.process import ReplayProcess
from warmstart.replay.runner import LaunchOptions, Prefetch, run_launch

KIB = 1024


def warmstart(db, *args):
    return subprocess.run([sys.executable, "-m", "warmstart", "--db", str(db), *args],
                          capture_output=True, cwd=REPO)


def test_unknown_app_runs_normally_with_its_output_and_status(tmp_path):
    r = warmstart(tmp_path / "db", "run", "--", "sh", "-c", "echo out-$((6*7)); echo err >&2; exit 7")
    assert r.returncode == 7
    assert r.stdout == b"out-42\n"
    assert b"err\n" in r.stderr and b"unknown app" in r.stderr


def test_signal_death_maps_to_128_plus_signal(tmp_path):
    r = warmstart(tmp_path / "db", "run", "--", "sh", "-c", "kill -TERM $$")
    assert r.returncode == 128 + 15


@pytest.fixture
def app_on_disk(tmp_path):
    require(have_loop(), "needs root and loop devices")
    require((REPO / "build" / "warmstart-replay").exists(), "run `make binaries`")
    from warmstart.emudisk import EmuDisk
    d = EmuDisk.up(name="replay-run-tests", profile="none", image="empty", size_mb=32, fresh=True)
    try:
        data = d.mountpoint / "data.bin"
        data.write_bytes(b"x" * (512 * KIB))
        os.sync()
        db = tmp_path / "db"
        conn = open_db(db)
        argv = ["/bin/sh", "-c", f"wc -c < {data}; exit 3"]
        make_app(conn, "wc", argv)
        sf = scheduled_file(data)
        save(conn, "wc", [[file_range(sf, 0, 128 * KIB)], [file_range(sf, 128 * KIB, 384 * KIB)]], [sf])
        yield db, conn, argv, data
    finally:
        d.down()


@pytest.mark.parametrize("mode", ["segmented", "reorder", "interleave", "none"])
def test_run_preserves_output_and_status_and_stores_the_launch(app_on_disk, mode):
    db, conn, argv, data = app_on_disk
    evict(data)
    r = warmstart(db, "run", "--mode", mode, "--", *argv)     # matched by executable + argv
    assert r.returncode == 3 and r.stdout.strip() == b"524288", r.stderr
    rows = list_launches(conn, mode=mode)
    assert len(rows) == 1 and rows[0]["exit_status"] == 3 and rows[0]["launch_time_s"] > 0
    replay = rows[0]["details"]["replay"]
    if mode == "none":
        assert replay is None and rows[0]["mechanism"] is None
    else:
        assert replay["status"] == "ok" and replay["bytes_scheduled"] == 512 * KIB
        assert replay["bytes_fetched"] + replay["bytes_resident"] <= 512 * KIB
        if mode == "reorder":   # everything is fetched before the app may start
            assert replay["bytes_fetched"] + replay["bytes_resident"] == 512 * KIB
        assert rows[0]["mechanism"] == "readahead"


def test_cold_run_drops_the_cache_and_is_stored_as_cold(app_on_disk):
    db, conn, argv, data = app_on_disk
    subprocess.run(["cat", str(data)], stdout=subprocess.DEVNULL, check=True)  # all of it cached
    assert cached_pages(data, 0, 512 * KIB) == 128
    dev = os.stat(data).st_dev
    stat = f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}/stat"
    sectors_read = lambda: int(open(stat).read().split()[2])  # noqa: E731
    before = sectors_read()
    r = warmstart(db, "run", "--cold", "--name", "wc", "--", "sh", "-c", f"cat {data} | wc -c; exit 3")
    assert r.returncode == 3 and r.stdout.strip() == b"524288", r.stderr
    assert b"mode=cold" in r.stderr
    # cat read the whole file from the disk again: the run dropped the cache before launching
    assert sectors_read() - before >= 512 * KIB // 512
    rows = list_launches(conn, mode="cold")
    assert len(rows) == 1 and rows[0]["details"]["replay"] is None  # no prefetch


def test_run_launch_library_json(app_on_disk):
    db, conn, argv, data = app_on_disk
    evict(data)
    out = run_launch(conn, argv, Prefetch("segmented"), LaunchOptions(passthrough=False), name="wc")
    assert out.prefetched and out.exit_status == 3 and out.output.strip() == b"524288"
    assert out.launch_time_s >= out.app_time_s and out.prebuffer_s > 0
    assert out.replay_stats["prebuffer_bytes"] == 128 * KIB
    assert cached_pages(data, 0, 512 * KIB) == 128       # all of it: prefetched or read by wc
    json.dumps(out.to_json())


def test_refused_export_releases_the_app_without_prefetch(tmp_path):
    require((REPO / "build" / "warmstart-replay").exists(), "run `make binaries`")
    bad = tmp_path / "bad.wsr"
    bad.write_bytes(b"WSREPLAY" + bytes(100))
    rp = ReplayProcess(bad, "segmented").start()
    assert rp.wait_ready(10) is False       # EOF without "ready"
    st = rp.finish(10)
    assert st["status"] == "refused" and st["exit_status"] == 3


def test_a_launch_reports_the_apps_own_cpu_time():
    """launch() takes the app's user + system CPU from wait4 at its exit, its waited-for children's
    included, and not the time it slept (the bench's per-launch CPU, docs/benchmarks.md)."""
    from warmstart.launching import launch
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\n"
    code = (f"import subprocess, sys, time\n{burn}"
            f"subprocess.run([sys.executable, '-c', {burn!r}])\ntime.sleep(0.4)\n")
    out = launch([sys.executable, "-c", code], passthrough=False)
    assert out.exit_status == 0 and out.end_reason == "exit"
    wall = out.launch_time_s
    # 0.3 s burnt by the app and 0.3 s by its child, plus interpreter start-up; 0.4 s asleep
    assert 0.6 <= out.cpu_s < wall - 0.35, (out.cpu_s, wall)
