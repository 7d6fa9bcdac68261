"""warmstartd against the real kernel: exec holds, allow-on-error, kill -9, SIGSTOP, ownership.

The daemon marks a private tmpfs mount (only its execs are held), except the latency test, which
must mark / to measure /bin/true. The replayer here is a small shell script that says "ready" on
the notify fd after a delay read from its schedule argument ("DELAY START": "start" after START
seconds first, then "ready" DELAY later): the hold logic is what is under
test, and a controllable delay is what the fault tests need (the real replayer is exercised in
test_hook_e2e.py).
"""

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import REPO, require
from warmstart.errors import WarmstartError
from warmstart.hook.index import Index, IndexEntry, read_index, write_index

BUILD = REPO / "build"
REPLAYER_SCRIPT = """#!/bin/sh
for a; do last=$a; done
read -r delay start <"$last"
if [ -n "$start" ]; then sleep "$start"; echo start >&3; fi
if [ "$delay" = never ]; then exec sleep 30; fi
sleep "$delay"
echo ready >&3
exec 3>&-
sleep 1
"""


def have_fanotify_perm() -> bool:
    if os.geteuid() != 0:
        return False
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.fanotify_init(0x4 | 0x1, os.O_RDONLY)  # FAN_CLASS_CONTENT | FAN_CLOEXEC
    if fd < 0:
        return False
    os.close(fd)
    return True


@pytest.fixture
def live(tmp_path):
    require(have_fanotify_perm(), "needs root and fanotify permission events (CONFIG_FANOTIFY_ACCESS_PERMISSIONS)")
    require((BUILD / "warmstartd").exists() and (BUILD / "warmstart-execbench").exists(),
            "warmstartd not built: run `make binaries`")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "wsthook", str(mnt)], check=True)
    h = Hook(tmp_path, mnt)
    try:
        yield h
    finally:
        h.stop()
        subprocess.run(["umount", "-l", str(mnt)])


class Hook:
    def __init__(self, tmp: Path, mnt: Path):
        self.tmp, self.mnt = tmp, mnt
        self.index = tmp / "state" / "hook.idx"
        self.events = tmp / "events.jsonl"
        self.stats = tmp / "stats.json"
        self.pidfile = tmp / "warmstartd.pid"
        self.log = tmp / "warmstartd.log"
        self.replayer = tmp / "fake-delay-replayer"
        self.replayer.write_text(REPLAYER_SCRIPT)
        self.replayer.chmod(0o755)
        self.proc = None
        self.n = 0

    def app(self, name="app", source="/bin/true") -> Path:
        p = self.mnt / name
        shutil.copy(source, p)
        return p

    def entry(self, exe: Path, delay="0.3", hold_ms=1000, needles=(), files=(), mtime_ns=None):
        self.n += 1
        sched = self.tmp / f"sched{self.n}"
        sched.write_text(delay)
        st = exe.stat()
        return IndexEntry(dev=st.st_dev, ino=st.st_ino, size=st.st_size,
                          mtime_ns=st.st_mtime_ns if mtime_ns is None else mtime_ns, schedule_id=self.n,
                          exe=os.fsencode(exe), schedule=os.fsencode(sched), name=exe.name,
                          needles=needles, files=tuple(os.fsencode(f) for f in files), hold_ms=hold_ms)

    def write(self, *entries):
        write_index(os.fsencode(self.index), Index(list(entries)))

    def start(self, *extra, mark_mount=True):
        args = [str(BUILD / "warmstartd"), "--index", str(self.index), "--replayer", str(self.replayer),
                "--events", str(self.events), "--stats", str(self.stats), "--pidfile", str(self.pidfile),
                *(["--mark", str(self.mnt)] if mark_mount else []), *extra]
        self.proc = subprocess.Popen(args, stderr=open(self.log, "ab"))
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if self.worker_pid():
                return
            time.sleep(0.05)
        pytest.fail("warmstartd did not start: " + self.log.read_text())

    def worker_pid(self):
        if self.proc is None or self.proc.poll() is not None or not self.pidfile.exists():
            return None
        before = self.stats.stat().st_mtime_ns if self.stats.exists() else 0
        self.proc.send_signal(signal.SIGUSR1)
        for _ in range(50):
            if self.stats.exists() and self.stats.stat().st_mtime_ns != before:
                try:
                    return json.loads(self.stats.read_text())["worker_pid"]
                except ValueError:
                    pass
            time.sleep(0.01)
        return None

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def records(self, event=None):
        if not self.events.exists():
            return []
        recs = [json.loads(line) for line in self.events.read_text().splitlines()]
        return [r for r in recs if event is None or r["event"] == event]


def spawn_exec(path):
    # Popen itself waits until the child's exec succeeds, so let sh (not on the marked mount)
    # do the held exec: Popen returns at once, the held exec happens in the child
    return subprocess.Popen(["/bin/sh", "-c", 'exec "$0"', str(path)])


def replayers(schedule: bytes) -> list:
    """The pids of the (fake) replayers of that schedule file running now."""
    out = []
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and schedule in (d / "cmdline").read_bytes():
                out.append(int(d.name))
        except OSError:
            pass
    return out


def timed_run(argv, timeout=10.0):
    t0 = time.monotonic()
    r = subprocess.run([str(a) for a in argv], timeout=timeout)
    return time.monotonic() - t0, r.returncode


def test_held_until_replayer_ready(live):
    app = live.app()
    live.write(live.entry(app, delay="0.3"))
    live.start()
    elapsed, rc = timed_run([app])
    assert rc == 0
    assert 0.28 <= elapsed < 0.95, elapsed
    [rec] = live.records("launch")
    assert rec["outcome"] == "ready" and rec["schedule_id"] == 1


def test_deadline_releases_a_silent_replayer(live):
    app = live.app()
    live.write(live.entry(app, delay="never", hold_ms=200))
    live.start()
    elapsed, rc = timed_run([app])
    assert rc == 0 and 0.19 <= elapsed < 0.9, elapsed
    assert live.records("launch")[0]["outcome"] == "deadline"


def test_the_hold_counts_from_the_replayers_start(live):
    """A replayer slow to start (a busy CPU) does not use up a short hold before its first read:
    the 150 ms hold counts from its "start" at 0.2 s, and its "ready" 50 ms later releases the
    exec (docs/hook.md, "Hold policy")."""
    app = live.app()
    live.write(live.entry(app, delay="0.05 0.2", hold_ms=150))
    live.start()
    elapsed, rc = timed_run([app])
    assert rc == 0 and 0.24 <= elapsed < 0.95, elapsed
    [rec] = live.records("launch")
    assert rec["outcome"] == "ready" and 190 <= rec["started_ms"] < 350, rec


def test_a_started_replayer_that_never_says_ready_is_released_at_its_hold(live):
    app = live.app()
    """Its hold, counted from its "start" at 20 ms, ends at 420 ms; not at the 600 ms that the
    start-up allowance gives a replayer that has not started."""
    app = live.app()
    live.write(live.entry(app, delay="never 0.02", hold_ms=400))
    live.start()
    elapsed, rc = timed_run([app])
    assert rc == 0 and 0.40 <= elapsed < 0.56, elapsed
    [rec] = live.records("launch")
    assert rec["outcome"] == "deadline" and rec["started_ms"] is not None, rec


def test_a_hold_longer_than_a_second_is_honoured(live):
    """A slow disk's pre-buffer may need more than the old fixed 1 s cap (docs/hook.md, "Hold
    policy"): the entry's own hold is the limit now."""
    app = live.app()
    live.write(live.entry(app, delay="1.6", hold_ms=4000))
    live.start()
    elapsed, rc = timed_run([app])
    assert rc == 0 and 1.55 <= elapsed < 3.5, elapsed
    assert live.records("launch")[0]["outcome"] == "ready"


def test_missing_replayer_allows_at_once(live):
    app = live.app()
    live.write(live.entry(app, delay="5"))
    live.replayer.unlink()
    live.start()
    elapsed, rc = timed_run([app])
    assert rc == 0 and elapsed < 0.5, elapsed
    assert live.records("launch")[0]["outcome"] == "replayer-exited"


def test_argv_signature_picks_the_script(live):
    # a copy of /bin/true named like an interpreter: only `python3 app.py` is this app
    py = live.app("python3")
    live.write(live.entry(py, delay="0.3", needles=(b"app.py",)))
    live.start()
    held, rc1 = timed_run([py, "-X", "dev", "app.py", "arg"])
    other, rc2 = timed_run([py, "other.py"])
    assert rc1 == rc2 == 0
    assert held >= 0.28 and other < 0.25, (held, other)
    assert [r["outcome"] for r in live.records("launch")] == ["ready"]


def test_an_index_replaced_between_the_wrappers_exec_and_the_apps_is_one_launch(live):
    """A chrooted launch is decided at the wrapper's exec (docs/hook.md, "Chrooted launches"); if
    the index is replaced while that exec is held and the app's entry then names another schedule
    of the same app (the learner's segmented-or-whole trial switching, a new analysis), the app's
    own exec in the same process is still that launch: one launch record, one exec-in-flight.
    Keyed by schedule id it got a second replayer, stored as a warm launch of its own."""
    import dataclasses
    wrap, app = live.app("wrap", "/bin/sh"), live.app("app")
    launcher = dataclasses.replace(live.entry(wrap, delay="1.0"), name="app", launcher=True)
    target = dataclasses.replace(live.entry(app, delay="0.3"), name="app")
    live.write(launcher, target)
    live.start()
    loads = lambda: live.log.read_text().count(" entries")  # noqa: E731  (one line per index load)
    before = loads()
    p = subprocess.Popen(["/bin/sh", "-c", 'exec "$0" -c "exec $1"', str(wrap), str(app)])
    deadline = time.monotonic() + 5
    while not replayers(launcher.schedule) and time.monotonic() < deadline:   # the wrapper's exec is held
        time.sleep(0.01)
    assert replayers(launcher.schedule) and p.poll() is None, live.records()
    live.write(dataclasses.replace(launcher, schedule_id=3), dataclasses.replace(target, schedule_id=4))
    while loads() == before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert loads() > before, live.log.read_text()
    # the new index was loaded while the wrapper's exec was still held (its record comes at the release)
    assert not live.records("launch"), live.records()
    assert p.wait(10) == 0
    launches, in_flight = live.records("launch"), live.records("exec-in-flight")
    assert [(r["schedule_id"], r["outcome"]) for r in launches] == [(1, "ready")], live.records()
    assert [r["pid"] for r in in_flight] == [p.pid], live.records()


def test_argv_signatures_of_execs_started_at_once(live):
    """Five execs at once, 40 times, both CPUs busy: each matched by its argv signature. The
    exec'ing task wakes the daemon before it goes to sleep on its permission event; until it
    sleeps (preempted there, it does not) /proc/PID/syscall says "running". The daemon now waits
    for it (procinfo.c, ws_exec_argv); before, 2-5 % of these launches were allowed unhooked,
    without a record (10 of 200 twice), and test_hook_concurrency.py found 3-19 of 100 chrooted
    launches caught only at the app's own exec, not at the wrapper's."""
    py = live.app("python3")
    live.write(live.entry(py, delay="0", needles=(b"app.py",)))
    live.start()
    hogs = [subprocess.Popen(["/bin/sh", "-c", "while :; do :; done"]) for _ in range(os.cpu_count() or 2)]
    try:
        for _ in range(40):
            r = subprocess.run(["/bin/sh", "-c", 'for i in 1 2 3 4 5; do "$0" app.py $i & done; wait', str(py)],
                               timeout=30)
            assert r.returncode == 0
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    outcomes = [r["outcome"] for r in live.records("launch")]
    assert outcomes == ["ready"] * 200, (len(outcomes), live.log.read_text()[-2000:])
    assert "unreadable" not in live.log.read_text()


def test_changed_file_marks_schedule_stale(live):
    app = live.app()
    data = live.mnt / "data.bin"
    data.write_bytes(b"x" * 4096)
    live.write(live.entry(app, delay="0.3", files=[data]))
    live.start()
    with open(data, "ab") as f:  # a package upgrade rewrites a scheduled file
        f.write(b"y")
    time.sleep(0.2)
    elapsed, rc = timed_run([app])
    assert rc == 0 and elapsed < 0.25, elapsed
    assert live.records("stale")[0]["schedule_id"] == 1
    assert live.records("launch")[0]["outcome"] == "stale"


def test_upgraded_executable_is_not_held(live):
    app = live.app()
    live.write(live.entry(app, delay="0.3", mtime_ns=app.stat().st_mtime_ns - 10**9))
    live.start()
    elapsed, rc = timed_run([app])
    assert rc == 0 and elapsed < 0.25
    assert live.records("identity-mismatch")


def test_index_not_owned_by_root_is_refused(live):
    app = live.app()
    live.write(live.entry(app, delay="0.5"))
    os.chown(live.index, 65534, 65534)
    with pytest.raises(WarmstartError, match="not owned by root"):
        read_index(os.fsencode(live.index))
    live.start()
    elapsed, rc = timed_run([app])
    assert rc == 0 and elapsed < 0.4, elapsed
    assert not live.records("launch")
    assert "refused" in live.log.read_text()


def test_group_writable_index_is_refused(live):
    app = live.app()
    live.write(live.entry(app, delay="0.5"))
    os.chmod(live.index, 0o664)
    live.start()
    elapsed, _ = timed_run([app])
    assert elapsed < 0.4 and not live.records("launch")


def test_kill_9_during_a_held_exec(live):
    app = live.app()
    live.write(live.entry(app, delay="never", hold_ms=1000))
    live.start()
    worker = live.worker_pid()
    t0 = time.monotonic()
    p = spawn_exec(app)
    time.sleep(0.15)
    assert p.poll() is None  # held
    os.kill(worker, signal.SIGKILL)
    p.wait(timeout=5)
    elapsed = time.monotonic() - t0
    # released by the kernel when the group's fd closed, well before the 1 s deadline
    assert p.returncode == 0 and elapsed < 0.7, elapsed
    # the watchdog starts a new worker, which hooks again
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and live.worker_pid() in (None, worker):
        time.sleep(0.05)
    assert live.worker_pid() not in (None, worker)


# An exec delayed by a stopped worker (docs/hook.md, "Daemon death, hangs and SIGSTOP"): the
# watchdog's or the sentinel's period (50 ms) + SIGKILL + the kernel releasing the group; typically
# < 100 ms (with a CPU kept busy: 10-26 ms, both processes stopped 41-57 ms), bounded here with
# room for a loaded 2-core machine.
STOPPED_EXEC_S = 0.25


def test_sigstop_of_the_worker_is_bounded(live):
    app = live.app()
    other = live.app("unrelated")
    live.write(live.entry(app, delay="0.1", hold_ms=1000))
    live.start()
    worker = live.worker_pid()
    os.kill(worker, signal.SIGSTOP)
    try:
        e1, rc1 = timed_run([other], timeout=10)
        e2, rc2 = timed_run([app], timeout=10)
    finally:
        try:
            os.kill(worker, signal.SIGCONT)
        except ProcessLookupError:
            pass
    assert rc1 == rc2 == 0
    print(f"\nworker stopped: unrelated exec {e1 * 1e3:.0f} ms, app exec {e2 * 1e3:.0f} ms")
    assert e1 < STOPPED_EXEC_S and e2 < STOPPED_EXEC_S, (e1, e2)
    assert "is stopped; killing it" in live.log.read_text()


def test_both_processes_stopped_is_bounded(live):
    """`kill -STOP` of the watchdog and the worker together (the daemon's process group): the
    sentinel, in a session of its own, kills the stopped worker, so execs on the marked mount
    proceed; the continued watchdog starts a new worker, which hooks again."""
    app = live.app()
    other = live.app("unrelated")
    live.write(live.entry(app, delay="0.1", hold_ms=1000))
    live.start()
    watchdog, worker = live.proc.pid, live.worker_pid()
    sentinels = [p for p in os.listdir("/proc") if p.isdigit() and _ppid(p) == watchdog and int(p) != worker]
    assert len(sentinels) == 1 and os.getsid(int(sentinels[0])) != os.getsid(watchdog), sentinels
    os.kill(watchdog, signal.SIGSTOP)
    os.kill(worker, signal.SIGSTOP)
    try:
        e1, rc1 = timed_run([other], timeout=10)
        e2, rc2 = timed_run([app], timeout=10)
    finally:
        os.kill(watchdog, signal.SIGCONT)
    assert rc1 == rc2 == 0
    print(f"\nboth stopped: unrelated exec {e1 * 1e3:.0f} ms, app exec {e2 * 1e3:.0f} ms")
    assert e1 < STOPPED_EXEC_S and e2 < STOPPED_EXEC_S, (e1, e2)
    assert "both stopped or hung; killing the worker" in live.log.read_text()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and live.worker_pid() in (None, worker):
        time.sleep(0.05)
    assert live.worker_pid() not in (None, worker)
    p = spawn_exec(app)
    time.sleep(0.05)
    assert p.poll() is None, "the new worker does not hold the app's exec"   # hooked again
    p.wait(timeout=5)


# system call numbers of poll and ppoll, as /proc/PID/syscall gives them (aarch64 has only ppoll)
POLL_SYSCALLS = {"x86_64": {"7", "271"}, "aarch64": {"73"}}


def test_a_missed_heartbeat_is_killed_and_logged_with_where_it_waited(live):
    """--hang-ms 60, under the worker's 100 ms poll period: an idle worker counts as hung. The
    watchdog kills it and logs where it waited (its state, system call and kernel stack: what
    tells a hang in the kernel from one in warmstartd), starts another, and after 5 restarts in
    a minute gives up; the app's exec proceeds, unheld."""
    app = live.app()
    live.write(live.entry(app, delay="never"))
    proc = subprocess.Popen([str(BUILD / "warmstartd"), "--index", str(live.index), "--replayer",
                             str(live.replayer), "--mark", str(live.mnt), "--hang-ms", "60"],
                            stderr=open(live.log, "ab"))
    try:
        assert proc.wait(timeout=20) == 1
    finally:
        proc.kill()
        proc.wait()
    log = live.log.read_text()
    kills = re.findall(r"missed its heartbeat for 60 ms \(state (\S), syscall (\S+), kernel stack: ([^)]+)\)", log)
    assert len(kills) == 6 and "restarted 5 times in a minute; giving up" in log, log
    # the idle worker waits in poll: asleep (S), or runnable (R) just woken by its timeout when
    # a busy CPU had not run it yet (none of the six asleep in one CI run); its stack says poll,
    # or, runnable after being preempted on its way out of poll, the stack shows where (the
    # syscall's exit) while /proc/PID/syscall still names poll (the likely cause of a CI failure
    # with a busy CPU whose report did not show the failing kill; it now does). Caught on a CPU
    # (no stack in /proc), the watchdog looks again (docs/hook.md):
    # in ten looks 1 ms apart an idle worker is back in its poll.
    poll = POLL_SYSCALLS[os.uname().machine]
    # (runnable on its way back to user space, past poll's exit: /proc/PID/syscall reads
    # "running" then, and the stack's top is the exit path; one CI run on a host stealing CPU)
    elsewhere = [(state, call, stack) for state, call, stack in kills if "none" in stack or state not in "RS"
                 or not ("do_sys_poll" in stack or (state == "R" and call in poll)
                         or (state == "R" and stack.startswith("exit_to_user_mode_loop") and "do_syscall_64" in stack))]
    assert not elsewhere, (elsewhere, log)
    elapsed, rc = timed_run([app])
    assert rc == 0 and elapsed < 0.5, elapsed


def _ppid(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rpartition(")")[2].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def test_kernel_blocks_execs_of_a_stopped_listener_without_watchdog(live):
    # why the watchdog exists: the kernel has no timeout for permission events
    other = live.app("unrelated")
    live.write()
    live.start("--no-watchdog")
    os.kill(live.proc.pid, signal.SIGSTOP)
    p = spawn_exec(other)
    try:
        time.sleep(1.0)
        assert p.poll() is None, "exec completed while the only listener was stopped"
    finally:
        live.proc.kill()  # closing the group lets the kernel allow the pending exec
        p.wait(timeout=5)
    assert p.returncode == 0


def test_exec_latency_of_unrelated_binaries(live, capsys):
    """The figure for the lead: /bin/true fork+exec+exit, median, with and without warmstartd
    marking / (every exec on the root mount then goes through the daemon). Alternating runs
    spread the noise of the other jobs on this 2-core machine over both arms."""
    app = live.app()
    live.write(live.entry(app))
    bench = [str(BUILD / "warmstart-execbench"), "1000", "/bin/true"]

    def run():
        return json.loads(subprocess.run(bench, capture_output=True, text=True, check=True).stdout)["median_us"]

    without, with_ = [], []
    for _ in range(2):
        without.append(run())
        live.start("--mark", "/")
        with_.append(run())
        stats = json.loads(live.stats.read_text()) if live.worker_pid() else {}
        live.stop()
    without_us, with_us = sorted(without)[0], sorted(with_)[0]
    diff = with_us - without_us
    with capsys.disabled():
        print(f"\n/bin/true exec median: {without_us:.0f} us without, {with_us:.0f} us with warmstartd "
              f"(+{diff:.0f} us); daemon decision median {stats.get('unrelated_decision_median_us')} us")
    # docs/hook.md: median decision 4-5 us (2.7-10.6 seen under load); the exec's +54-233 us
    # (-83 to +51 us with a CPU kept busy, 2026-12-02) grows with the machine's load (two
    # sleep/wake round trips): about twice the largest seen
    assert stats["unrelated_decision_median_us"] < 20, stats
    assert diff < 500, (without, with_)


def test_inode_marks_bring_no_event_for_an_unindexed_binary(live):
    """docs/hook.md, "Exec latency": with inode marks only (no --mark), the daemon receives 0
    events for execs of binaries the index does not name, on the indexed one's mount or not, and
    one for the indexed binary's exec (its stats' events counter)."""
    app = live.app()
    other = live.app("other")            # the same bytes, another inode on the same mount
    live.write(live.entry(app, delay="0"))
    live.start(mark_mount=False)

    def events():
        live.worker_pid()                 # SIGUSR1: the stats file written anew
        return json.loads(live.stats.read_text())["events"]

    before = events()
    for exe in ("/bin/true", other):
        subprocess.run([str(BUILD / "warmstart-execbench"), "200", str(exe)], capture_output=True, check=True)
    assert events() == before
    assert timed_run([app])[1] == 0
    assert events() == before + 1
