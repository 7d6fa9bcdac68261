"""Analysis on any machine: an app on a disk whose node refuses O_DIRECT (this VM's /dev/vda,
many containers and hardened VMs) is recorded, analyzed and run with no extra step; the disk is
profiled through a scratch file on its file system, once for the machine (analyzer/kept.py)."""

import json
import os
import subprocess
import sys

from conftest import REPO, have_tracefs, require
from warmstart.analyzer.probe import check_direct, device_path
from warmstart.analyzer.profile import class_profile
from warmstart.errors import WarmstartError


def ws(db, *args, env=None):
    p = subprocess.run([sys.executable, "-m", "warmstart", "--db", str(db), *args], capture_output=True,
                       text=True, cwd=REPO, timeout=600, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    return p


def test_record_analyze_run_on_a_disk_that_refuses_direct_opens(tmp_path):
    require(have_tracefs(), "needs root and tracefs")
    dev = os.stat(sys.executable).st_dev
    try:
        check_direct(device_path(dev))
        refused = False
    except WarmstartError:
        refused = True
    db, other = tmp_path / "w.db", tmp_path / "other.db"
    env = dict(os.environ, WARMSTART_PROFILE_CACHE=str(tmp_path / "kept"))   # nothing kept yet
    argv = [sys.executable, "-c", "import json, decimal, email.mime.text"]
    for d in (db, other):
        ws(d, "record", "--name", "rootapp", "--", *argv, env=env)
    r = json.loads(ws(db, "analyze", "rootapp", "--json", env=env).stdout)  # no --probe, no profile-disk first
    assert r["schedule_id"] and r["total_bytes"] > 0
    if refused:  # as on this machine: the fallback profiled the disk and said how
        assert r["probe"] == "model" and "disk probes impossible" in r["fallback"], r
        assert "timed through" in r["profiled"] or "class model" in r["profiled"], r
        again = json.loads(ws(db, "analyze", "rootapp", "--json", env=env).stdout)
        assert "profiled" not in again  # the profile is kept in the database: not measured twice
        if "timed through" in r["profiled"]:
            # ... and for the machine: another database takes it, and stores it as its own
            elsewhere = json.loads(ws(other, "analyze", "rootapp", "--json", env=env).stdout)
            assert elsewhere["profiled"].startswith("kept from a timing of this disk"), elsewhere
            (kept,) = (tmp_path / "kept").iterdir()
            os.chmod(kept, 0o666)          # writable by anyone: not trusted, timed again
            third = tmp_path / "third.db"
            ws(third, "record", "--name", "rootapp", "--", *argv, env=env)
            assert "timed through" in json.loads(ws(third, "analyze", "rootapp", "--json", env=env).stdout)["profiled"]
    out = json.loads(ws(db, "run", "--json", "--name", "rootapp", "--", *argv).stdout)
    assert out["prefetched"] and out["exit_status"] == 0, out


def test_class_models_are_plausible():
    hdd, ssd = class_profile(True, 500 << 30), class_profile(False, 500 << 30)
    assert 0.008 < hdd.c_switch_s < 0.02 and ssd.c_switch_s < 0.001
    assert hdd.seek_s(1 << 30) > hdd.seek_s(1 << 20) > 0
    assert hdd.access_time([(1, 0, 4096), (1, 100 << 30, 4096)]) > ssd.access_time([(1, 0, 4096), (1, 100 << 30, 4096)])


def test_profile_disk_of_a_directory_on_such_a_disk(tmp_path):
    require(have_tracefs(), "needs root")
    out = json.loads(ws(tmp_path / "w.db", "profile-disk", "/var/tmp", "--json").stdout)
    assert out["profile_id"] and out["r_tr_Bps"] > 0
    if "how" in out:  # the node refused O_DIRECT, as on this machine
        assert "timed through" in out["how"] or "class model" in out["how"], out
