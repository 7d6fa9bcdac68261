"""THE safety test of the speculative copy: a hostile program tries to change the world from
inside the sandbox, and the host is checked afterwards, not only the program's own report."""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

from conftest import REPO, have_root, require

HELPER = REPO / "build" / "ws-spec-run"

HOSTILE = r'''
import os, signal, socket, sys, ctypes
victim_dir, tcp_port, unix_path, test_pid = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
def attempt(name, fn):
    try:
        fn()
        print("ESCAPED", name, flush=True)
    except Exception as e:
        print("refused", name, type(e).__name__, flush=True)
def write_existing():
    with open(os.path.join(victim_dir, "keep.txt"), "w") as f: f.write("overwritten")
def create_new():
    with open(os.path.join(victim_dir, "new.txt"), "w") as f: f.write("x")
def create_etc():
    open("/etc/warmstart-spec-escape", "w").close()
def delete():
    os.unlink(os.path.join(victim_dir, "keep.txt"))
def rename():
    os.rename(os.path.join(victim_dir, "keep.txt"), os.path.join(victim_dir, "moved.txt"))
def chmod():
    os.chmod(os.path.join(victim_dir, "keep.txt"), 0o777)
def mkdir():
    os.mkdir(os.path.join(victim_dir, "d"))
def tcp():
    s = socket.create_connection(("127.0.0.1", tcp_port), timeout=1); s.sendall(b"hello")
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b"hello", ("127.0.0.1", tcp_port))
def unix():
    s = socket.socket(socket.AF_UNIX); s.connect(unix_path); s.sendall(b"hello")
def unix_dgram():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); s.sendto(b"hello", unix_path)
def netlink():
    socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
def sig_parent():
    os.kill(os.getppid(), signal.SIGKILL)
    raise OSError("parent is the sandbox's init (pid %d): signal ignored" % os.getppid())
def sig_test():
    os.kill(test_pid, signal.SIGUSR1)
def sig_all():
    # -1 would reach every process this one may signal: only its own namespace
    for pid in range(2, 4096):
        if pid != os.getpid():
            try: os.kill(pid, signal.SIGUSR1)
            except ProcessLookupError: pass
    raise OSError("only processes of the namespace were reachable")
def drop_caches():
    with open("/proc/sys/vm/drop_caches", "w") as f: f.write("3")
def block_dev():
    os.open("/dev/" + sorted(d for d in os.listdir("/sys/block"))[0], os.O_WRONLY)
def mount():
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(b"none", victim_dir.encode(), b"tmpfs", 0, None) != 0:
        raise OSError(ctypes.get_errno(), "mount")
def remount_rw():
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(None, b"/", None, 32 | 4096, None) != 0:  # MS_REMOUNT|MS_BIND
        raise OSError(ctypes.get_errno(), "remount")
def ptrace_init():
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.ptrace(16, 1, None, None) != 0:  # PTRACE_ATTACH
        raise OSError(ctypes.get_errno(), "ptrace")
def hostname():
    import socket as s
    s.sethostname("escaped")
    if open("/proc/sys/kernel/hostname").read().strip() == "escaped":
        raise OSError("own uts namespace: the host's name is untouched")
def _clone(flags):   # clone(flags | SIGCHLD): a child that exits at once, in the new namespaces
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    pid = libc.syscall(56, flags | 17, 0, 0, 0, 0)
    if pid == 0:
        os._exit(0)
    if pid < 0:
        raise OSError(ctypes.get_errno(), "clone")
    os.waitpid(pid, 0)
def clone_userns():
    _clone(0x10000000)   # CLONE_NEWUSER
def clone_netns():
    _clone(0x40000000)   # CLONE_NEWNET
def clone_mountns():
    _clone(0x00020000)   # CLONE_NEWNS
def clone3_userns():
    import struct
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    args = ctypes.create_string_buffer(struct.pack("=8Q", 0x10000000, 0, 0, 0, 17, 0, 0, 0))
    pid = libc.syscall(435, args, 64)
    if pid == 0:
        os._exit(0)
    if pid < 0:
        raise OSError(ctypes.get_errno(), "clone3")
    os.waitpid(pid, 0)
for name, fn in list(globals().items()):
    if callable(fn) and name not in ("attempt", "_clone") and fn.__module__ == "__main__":
        attempt(name, fn)
with open("/tmp/scratch", "w") as f: f.write("tmpfs works")
print("tmp write:", open("/tmp/scratch").read(), flush=True)
import threading   # pthread_create tries clone3 first: refused as absent, it falls back to clone
ran = []
t = threading.Thread(target=lambda: ran.append(1)); t.start(); t.join()
print("threads work:", ran == [1], flush=True)
print("DONE", flush=True)
'''


@pytest.fixture
def built():
    require(have_root(), "the sandbox needs root (namespaces, mounts)")
    if not HELPER.exists():
        subprocess.run(["make", "-f", "Makefile", "-f", "replayer/speculate.mk", str(HELPER.relative_to(REPO))],
                       cwd=REPO, check=True, capture_output=True)
    return HELPER


def test_hostile_copy_changes_nothing(built, tmp_path):
    victim = tempfile.mkdtemp(prefix="warmstart-spec-victim-", dir="/var/lib")  # not under a tmpfs the sandbox replaces
    usr1 = []
    old = signal.signal(signal.SIGUSR1, lambda *a: usr1.append(1))
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(1)
    tcp.settimeout(0.2)
    port = tcp.getsockname()[1]
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", port))
    udp.settimeout(0.2)
    unix_path = os.path.join(victim, "sock")
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(unix_path)
    unix.listen(1)
    unix.settimeout(0.2)
    try:
        with open(os.path.join(victim, "keep.txt"), "w") as f:
            f.write("original")
        before = sorted(os.listdir(victim))
        out = tmp_path / "copy-output.txt"
        from warmstart.speculate.sandbox import SpeculativeCopy
        with SpeculativeCopy([sys.executable, "-c", HOSTILE, victim, str(port), unix_path, str(os.getpid())],
                             copy_output=os.fsencode(out)) as copy:
            status = copy.wait(timeout=60)
            assert status is not None, "the hostile copy did not finish in 60 s"
        report = out.read_text()
        assert "DONE" in report, report
        attempts = [l for l in report.splitlines() if l.startswith(("refused", "ESCAPED"))]
        assert len(attempts) >= 23, report
        # The program's own view: every attempt failed ...
        assert "ESCAPED" not in report, report
        assert "tmp write: tmpfs works" in report  # ... but writes to its tmpfs work (no spurious failures)
        assert "threads work: True" in report      # ... and threads start (clone3 refused, clone works)
        for ns in ("clone_userns", "clone_netns", "clone_mountns", "clone3_userns"):
            assert f"refused {ns}" in report, report
        # ... and the host's view: nothing changed.
        assert sorted(os.listdir(victim)) == before
        assert open(os.path.join(victim, "keep.txt")).read() == "original"
        assert oct(os.stat(os.path.join(victim, "keep.txt")).st_mode & 0o777) != oct(0o777)
        assert not os.path.exists("/etc/warmstart-spec-escape")
        assert usr1 == [], "the copy signalled the test process"
        for s in (tcp, unix):
            with pytest.raises(socket.timeout):
                s.accept()
        with pytest.raises(socket.timeout):
            udp.recvfrom(16)
        assert socket.gethostname() != "escaped"
    finally:
        signal.signal(signal.SIGUSR1, old)
        for s in (tcp, udp, unix):
            s.close()
        shutil.rmtree(victim, ignore_errors=True)


def test_copy_never_outlives_its_supervisor(built, tmp_path):
    """Killing the supervisor (even with SIGKILL) ends every process of the copy, daemons included."""
    from warmstart.speculate.sandbox import SpeculativeCopy, wait_gone
    copy = SpeculativeCopy(["sh", "-c", "sleep 300 & (setsid sleep 300 &) ; sleep 300"]).start()
    try:
        deadline = time.monotonic() + 5
        while len(copy.pids()) < 4 and time.monotonic() < deadline:
            time.sleep(0.02)
        pids = copy.pids()
        assert len(pids) >= 4, pids  # init, sh, and the sleeps
        copy._proc.kill()  # SIGKILL the supervisor: no cleanup code of ours runs
        assert wait_gone(pids, timeout=5) == []
    finally:
        copy.kill()


def test_copy_is_killed_when_the_launch_ends(built):
    from warmstart.speculate.fallback import run_fallback_launch
    r = run_fallback_launch(["sh", "-c", "sleep 0.3; echo done"], mechanism="spec", trace=False)
    assert r.exit_status == 0 and r.output == b"done\n"
    assert r.copy["still_alive_after_kill"] == []
    # the copy ran the same 0.3 s command; it finished, was killed at the launch end, or earlier
    # by cost/benefit because it was not ahead of the launch
    assert r.copy["killed_reason"] in (None, "launch ended", "not ahead")


def test_second_kill_is_harmless(built):
    from warmstart.speculate.sandbox import SpeculativeCopy, wait_gone
    copy = SpeculativeCopy(["sleep", "5"]).start()
    pids = copy.pids()
    copy.kill("not ahead")
    copy.kill("launch ended")   # what fallback does after a cost/benefit kill
    assert copy.killed_reason == "not ahead" and wait_gone(pids) == []


def test_progress_counts_the_commands_reads_not_the_sandbox_set_up(built):
    """The cost rule judges the copy by its progress (rchar) once it has any: the namespace's init,
    which only builds the sandbox (it reads the start byte), must not count, or a copy still
    setting up on a busy CPU is killed as 'not ahead' before its command opened a file."""
    from warmstart.speculate.sandbox import SpeculativeCopy

    def rchar(pid):
        with open(f"/proc/{pid}/io") as f:
            return int(next(l for l in f if l.startswith("rchar:")).split()[1])

    def comm(pid):
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()

    with SpeculativeCopy(["sleep", "30"], prefetch=False).start() as copy:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            cmd = [p for p in copy.pids() if p != copy.init_pid]
            if cmd and all(comm(p) == "sleep" for p in cmd):
                break
            time.sleep(0.02)
        assert cmd and comm(cmd[0]) == "sleep", cmd
        time.sleep(0.2)   # sleep has loaded its libraries: its rchar stays put
        own = sum(rchar(p) for p in cmd)
        assert rchar(copy.init_pid) >= 1 and own > 0
        assert copy.progress_bytes() == own


def test_copy_runs_at_idle_priority(built, tmp_path):
    from warmstart.speculate.sandbox import SpeculativeCopy
    out = tmp_path / "o.txt"
    with SpeculativeCopy(["sh", "-c", "cat /proc/self/sched | grep '^policy'; ionice"],
                         copy_output=os.fsencode(out)) as copy:
        assert copy.wait(timeout=20) == 0
    text = out.read_text()
    assert "policy" in text and text.split("policy")[1].split()[1] == "5", text  # SCHED_IDLE
    assert "best-effort: prio 7" in text or "idle" in text, text


def test_seccomp_policy_call_by_call(built):
    """build/test-spec-filter (replayer/speculate/test_filter.c): every refused call, argument
    rule (namespace flags of clone, clone3 absent) and allowed call of the copy's filter."""
    binary = REPO / "build" / "test-spec-filter"
    subprocess.run(["make", str(binary)], cwd=REPO, check=True, capture_output=True)
    r = subprocess.run([str(binary)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert " 0 failed" in r.stdout, r.stdout
