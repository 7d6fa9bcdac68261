"""The LD_PRELOAD shim: it holds a hooked program until the replayer is ready, and is otherwise
invisible (same output, same errno at main, no child left for the app's wait(), no stderr)."""

import os
import shutil
import subprocess
import time

import pytest

from conftest import REPO, require
from warmstart.hook.index import Index, IndexEntry, write_index

SHIM = REPO / "build" / "libwarmstart-preload.so"
PROBE_C = r"""
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
int main(int argc, char **argv) {
    int e = errno;                       /* errno as the program finds it */
    int w = wait(NULL);                  /* must not see a replayer child */
    printf("errno=%d wait=%d/%d argc=%d\n", e, w, errno, argc);
    fprintf(stderr, "stderr line\n");
    return 3;
}
"""
REPLAYER = "#!/bin/sh\nfor a; do last=$a; done\nsleep \"$(cat \"$last\")\"\necho ready >&3\n"


@pytest.fixture
def shim(tmp_path):
    require(SHIM.exists(), "libwarmstart-preload.so not built: run `make binaries`")
    require(shutil.which("gcc") is not None, "needs gcc to build the probe program")
    src = tmp_path / "probe.c"
    src.write_text(PROBE_C)
    probe = tmp_path / "probe"
    subprocess.run(["gcc", "-O2", "-o", str(probe), str(src)], check=True)
    replayer = tmp_path / "delay-replayer"
    replayer.write_text(REPLAYER)
    replayer.chmod(0o755)
    sched = tmp_path / "sched"
    sched.write_text("0.3")
    return tmp_path, probe, replayer, sched


def run(probe, env_extra, args=()):
    env = {"PATH": "/usr/bin:/bin", **env_extra}
    t0 = time.monotonic()
    r = subprocess.run([str(probe), *args], env=env, capture_output=True, timeout=10)
    return r, time.monotonic() - t0


def index_for(tmp, probe, sched, needles=()):
    st = probe.stat()
    idx = tmp / "hook.idx"
    write_index(os.fsencode(idx), Index([IndexEntry(
        dev=st.st_dev, ino=st.st_ino, size=st.st_size, mtime_ns=st.st_mtime_ns, schedule_id=1,
        exe=os.fsencode(probe), schedule=os.fsencode(sched), name="probe", needles=needles, hold_ms=800)]))
    return idx


def test_hooked_program_waits_for_ready_and_is_otherwise_unchanged(shim):
    tmp, probe, replayer, sched = shim
    idx = index_for(tmp, probe, sched)
    plain, t_plain = run(probe, {})
    hooked, t_hooked = run(probe, {"LD_PRELOAD": str(SHIM), "WARMSTART_INDEX": str(idx),
                                   "WARMSTART_REPLAYER": str(replayer)})
    assert (hooked.returncode, hooked.stdout, hooked.stderr) == (plain.returncode, plain.stdout, plain.stderr)
    assert b"wait=-1/10" in hooked.stdout  # ECHILD: the replayer is not the app's child
    assert t_hooked >= 0.28 > t_plain, (t_plain, t_hooked)


def test_signature_mismatch_and_unknown_programs_are_untouched(shim):
    tmp, probe, replayer, sched = shim
    idx = index_for(tmp, probe, sched, needles=(b"--only-this",))
    env = {"LD_PRELOAD": str(SHIM), "WARMSTART_INDEX": str(idx), "WARMSTART_REPLAYER": str(replayer)}
    other, t_other = run(probe, env, ["--something-else"])
    hooked, t_hooked = run(probe, env, ["--only-this"])
    assert t_other < 0.25 <= t_hooked, (t_other, t_hooked)
    plain, _ = run(probe, {}, ["--something-else"])
    assert (other.stdout, other.stderr) == (plain.stdout, plain.stderr)


def test_missing_replayer_or_corrupt_index_changes_nothing(shim):
    tmp, probe, replayer, sched = shim
    idx = index_for(tmp, probe, sched)
    plain, _ = run(probe, {})
    r, t = run(probe, {"LD_PRELOAD": str(SHIM), "WARMSTART_INDEX": str(idx),
                       "WARMSTART_REPLAYER": str(tmp / "no-such-replayer")})
    assert (r.stdout, r.stderr) == (plain.stdout, plain.stderr) and t < 0.5
    data = bytearray(idx.read_bytes())
    data[-2] ^= 0xFF
    idx.write_bytes(bytes(data))
    r, t = run(probe, {"LD_PRELOAD": str(SHIM), "WARMSTART_INDEX": str(idx),
                       "WARMSTART_REPLAYER": str(replayer)})
    assert (r.stdout, r.stderr) == (plain.stdout, plain.stderr) and t < 0.25
