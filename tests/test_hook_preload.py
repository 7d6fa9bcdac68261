"""The LD_PRELOAD shim: it holds a hooked program until the replayer is ready, and is otherwise
invisible (same output, same errno at main, no child left for the app's wait(), no stderr), and
inert in setuid and setgid programs."""

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from conftest import REPO, have_root, require
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


def build_probe(tmp):
    """The probe program, a replayer that is ready after the schedule's seconds, and a 0.3 s schedule."""
    require(SHIM.exists(), "libwarmstart-preload.so not built: run `make binaries`")
    require(shutil.which("gcc") is not None, "needs gcc to build the probe program")
    src = tmp / "probe.c"
    src.write_text(PROBE_C)
    probe = tmp / "probe"
    subprocess.run(["gcc", "-O2", "-o", str(probe), str(src)], check=True)
    replayer = tmp / "delay-replayer"
    replayer.write_text(REPLAYER)
    replayer.chmod(0o755)
    sched = tmp / "sched"
    sched.write_text("0.3")
    return tmp, probe, replayer, sched


@pytest.fixture
def shim(tmp_path):
    return build_probe(tmp_path)


@pytest.fixture
def shared_shim():
    """build_probe in a world-readable directory (tmp_path is 0700), for programs run as nobody."""
    require(have_root(), "needs root (setuid copies, mount namespace, running as nobody)")
    require(shutil.which("unshare") is not None and shutil.which("setpriv") is not None,
            "needs unshare and setpriv (util-linux)")
    tmp = Path(tempfile.mkdtemp(prefix="warmstart-setuid-"))
    try:
        tmp.chmod(0o755)
        yield build_probe(tmp)
    finally:
        shutil.rmtree(tmp)


def run(probe, env_extra, args=(), prefix=()):
    env = {"PATH": "/usr/bin:/bin", **env_extra}
    t0 = time.monotonic()
    r = subprocess.run([*prefix, str(probe), *args], env=env, capture_output=True, timeout=10)
    return r, time.monotonic() - t0


def index_for(tmp, probes, sched, needles=()):
    entries = []
    for probe in probes:
        st = probe.stat()
        entries.append(IndexEntry(
            dev=st.st_dev, ino=st.st_ino, size=st.st_size, mtime_ns=st.st_mtime_ns, schedule_id=1,
            exe=os.fsencode(probe), schedule=os.fsencode(sched), name="probe", needles=needles, hold_ms=800))
    idx = tmp / "hook.idx"
    write_index(os.fsencode(idx), Index(entries))
    return idx


def test_hooked_program_waits_for_ready_and_is_otherwise_unchanged(shim):
    tmp, probe, replayer, sched = shim
    idx = index_for(tmp, [probe], sched)
    plain, t_plain = run(probe, {})
    hooked, t_hooked = run(probe, {"LD_PRELOAD": str(SHIM), "WARMSTART_INDEX": str(idx),
                                   "WARMSTART_REPLAYER": str(replayer)})
    assert (hooked.returncode, hooked.stdout, hooked.stderr) == (plain.returncode, plain.stdout, plain.stderr)
    assert b"wait=-1/10" in hooked.stdout  # ECHILD: the replayer is not the app's child
    assert t_hooked >= 0.28 > t_plain, (t_plain, t_hooked)


def test_signature_mismatch_and_unknown_programs_are_untouched(shim):
    tmp, probe, replayer, sched = shim
    idx = index_for(tmp, [probe], sched, needles=(b"--only-this",))
    env = {"LD_PRELOAD": str(SHIM), "WARMSTART_INDEX": str(idx), "WARMSTART_REPLAYER": str(replayer)}
    other, t_other = run(probe, env, ["--something-else"])
    hooked, t_hooked = run(probe, env, ["--only-this"])
    assert t_other < 0.25 <= t_hooked, (t_other, t_hooked)
    plain, _ = run(probe, {}, ["--something-else"])
    assert (other.stdout, other.stderr) == (plain.stdout, plain.stderr)


def test_missing_replayer_or_corrupt_index_changes_nothing(shim):
    tmp, probe, replayer, sched = shim
    idx = index_for(tmp, [probe], sched)
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


def test_setuid_and_setgid_programs_are_not_held_even_through_ld_so_preload(shared_shim):
    """The loader ignores LD_PRELOAD in secure-execution programs but honours /etc/ld.so.preload,
    which is how the shim is installed: run as nobody in a mount namespace whose /etc/ld.so.preload
    names the shim, a plain copy of the probe is held and setuid and setgid copies are not."""
    tmp, probe, replayer, sched = shared_shim
    copies = {"plain": 0o755, "setuid": 0o4755, "setgid": 0o2755}
    for name, mode in copies.items():
        shutil.copy(probe, tmp / name)
        os.chown(tmp / name, 0, 0)  # setuid root, setgid root: neither is nobody's nor nogroup's
        (tmp / name).chmod(mode)
    idx = index_for(tmp, [tmp / name for name in copies], sched)
    (tmp / "etc").mkdir()
    (tmp / "etc" / "ld.so.preload").write_text(shutil.copy(SHIM, tmp) + "\n")
    # /etc/ld.so.preload may not exist to bind-mount over: overlay our etc/ on /etc, in this namespace only
    as_nobody_with_preload = [
        "unshare", "--mount", "--propagation", "private", "sh", "-ec",
        f"mount -t overlay -o lowerdir={tmp}/etc:/etc overlay /etc; "
        'exec setpriv --reuid=nobody --regid=nogroup --clear-groups "$@"', "sh"]
    env = {"WARMSTART_INDEX": str(idx), "WARMSTART_REPLAYER": str(replayer)}
    plain, _ = run(probe, {})
    times = {}
    for name in copies:
        r, times[name] = run(tmp / name, env, prefix=as_nobody_with_preload)
        assert (r.returncode, r.stdout, r.stderr) == (plain.returncode, plain.stdout, plain.stderr), name
    assert max(times["setuid"], times["setgid"]) < 0.25 and times["plain"] >= 0.28, times
