"""scripts/hook-breakdown.py: per app, the medians of a bench run's hooked launches split into the
pre-buffer, the app's CPU and the rest, segmented and whole schedules apart."""

import importlib.util
import json
import subprocess
import sys

import pytest

from conftest import REPO
from warmstart.db.connection import open_db
from warmstart.db.launches import insert_launch
from warmstart.db.recordings import upsert_app

SCRIPT = REPO / "scripts" / "hook-breakdown.py"


def _load():
    spec = importlib.util.spec_from_file_location("hook_breakdown", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _launch(conn, app_id, bench, t, release_s, seg_bytes, cpu, waited_ns=0, mode="hook", runq_ns=None):
    replay = {"t_prebuffer_ns": int(release_s * 1e9), "segments": [{"bytes": b} for b in seg_bytes],
              "app_wait": {"waited_ns": waited_ns, **({} if runq_ns is None else {"runq_ns": runq_ns})}}
    insert_launch(conn, mode=mode, launch_time_s=t, app_id=app_id, bench_id=bench,
                  details={"replay": replay, "bench": {"app_cpu_s": cpu}})


@pytest.fixture
def bench_db(tmp_path):
    db = tmp_path / "w.db"
    conn = open_db(db)
    with conn:
        a = upsert_app(conn, "a", b"/bin/true", ["true"])
        b = upsert_app(conn, "b", b"/bin/false", ["false"])
        _launch(conn, a, "B1", 0.50, 0.10, [30, 70], 0.30, waited_ns=20_000_000, runq_ns=10_000_000)
        _launch(conn, a, "B1", 0.70, 0.20, [30, 70], 0.40, runq_ns=30_000_000)
        _launch(conn, a, "B1", 0.90, 0.30, [30, 70], 0.50, runq_ns=50_000_000)
        _launch(conn, a, "B1", 0.60, 0.45, [100], 0.10)                   # its schedule fetched whole
        _launch(conn, a, "B1", 0.10, 0.01, [30, 70], 0.05, mode="segmented")   # not a hooked launch
        _launch(conn, a, "B2", 0.10, 0.01, [30, 70], 0.05)                 # another bench run
        _launch(conn, b, "B1", 0.40, 0.30, [10, 10], 0.05)
        insert_launch(conn, mode="hook", launch_time_s=None, app_id=b, bench_id="B1",
                      details={"not_timed": "no exit seen"})               # not timed: left out
    conn.close()
    return db


def test_medians_per_app_and_schedule_kind(bench_db):
    out = _load().breakdown(open_db(bench_db), "B1")
    assert set(out) == {"a", "b"} and set(out["a"]) == {"segmented", "whole"} and set(out["b"]) == {"segmented"}
    seg = out["a"]["segmented"]
    assert seg["n"] == 3
    assert seg["launch_s"] == pytest.approx(0.70) and seg["release_s"] == pytest.approx(0.20)
    assert seg["app_cpu_s"] == pytest.approx(0.40) and seg["seg1_share"] == pytest.approx(0.30)
    assert seg["rest_s"] == pytest.approx(0.10) and seg["waited_s"] == pytest.approx(0.0)
    assert seg["runq_s"] == pytest.approx(0.03)
    whole = out["a"]["whole"]
    assert whole["n"] == 1 and whole["seg1_share"] == pytest.approx(1.0) and whole["rest_s"] == pytest.approx(0.05)
    assert out["b"]["segmented"]["n"] == 1 and out["b"]["segmented"]["rest_s"] == pytest.approx(0.05)
    assert whole["runq_s"] is None    # a replayer that did not count it: not a 0


def test_command_line(bench_db):
    p = subprocess.run([sys.executable, str(SCRIPT), "--db", str(bench_db), "B1", "--json"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["a"]["segmented"]["n"] == 3
    p = subprocess.run([sys.executable, str(SCRIPT), "--db", str(bench_db), "B1"], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0 and "a " in p.stdout and "segmented" in p.stdout and "whole" in p.stdout, p.stdout
    p = subprocess.run([sys.executable, str(SCRIPT), "--db", str(bench_db), "NOPE"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 1 and "no hooked launch" in p.stderr and "--modes" in p.stderr, p.stderr
