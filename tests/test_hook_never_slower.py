"""Never slower than no prefetch (issue 22 item 4), through the real hook: warmstartd, its
learner and the replayer on the emulated 7200 rpm disk. A schedule that cannot help -- the
app's own ranges turned into raw reads of the block device, which ext4 never looks in for file
data (what the btrfs recordings scheduled before their files could be mapped) -- costs real disk
time in front of every launch. The learner's feedback must see from the launches' exact times
that they are not faster than cold and, with learn = "off", take the app off the prefetch path
within 3 launches, saying why in `hook status`.
"""

import sqlite3
import time

import test_hook_e2e
from test_hook_e2e import record_and_analyze, wait_for_hook_rows

hookenv = test_hook_e2e.hookenv   # the fixture: its own hook tree and database, uninstalled after

NAME = "hk-mail"


def _useless(db, name) -> int:
    """Turn the app's active schedule into raw block-device reads of the same sectors (file_no
    NULL: read through the block device's page cache), without its metadata ranges (those would
    help on ext4). Returns the schedule id and leaves the bytes fetched as they were."""
    conn = sqlite3.connect(db)
    try:
        sid = conn.execute("SELECT s.id FROM schedules s JOIN apps a ON a.id = s.app_id"
                           " WHERE a.name = ? AND s.active = 1", (name,)).fetchone()[0]
        conn.execute("DELETE FROM schedule_ranges WHERE schedule_id = ? AND file_no IS NULL", (sid,))
        n = conn.execute("UPDATE schedule_ranges SET file_no = NULL, file_offset = NULL WHERE schedule_id = ?",
                         (sid,)).rowcount
        assert n > 0, "the schedule has no file ranges to turn into raw reads"
        conn.commit()
        return sid
    finally:
        conn.close()


def test_a_schedule_that_cannot_help_leaves_the_prefetch_path_within_three_launches(hookenv, capsys):
    h = hookenv
    record_and_analyze(h, NAME)
    sid = _useless(h.db, NAME)
    colds, hooked, times = [], [], []
    for i in range(3):
        # the app's last unhooked launches, interleaved with the hooked ones (the daemon stopped:
        # it would hook them too), are its cold reference; the machine is shared, its load varies
        if i:
            h.daemon(False)
        h.disk.drop_caches()
        colds.append(h.wsj("run", "--cold", "--name", NAME, "--", *h.argv(NAME))["launch_time_s"])
        inst = h.wsj("hook", "install")   # learn = "off": the default
        if NAME not in [e["app"] for e in inst["entries"]]:
            break
        n = len(h.events())
        h.disk.drop_caches()
        t, p = h.plain(NAME)
        assert p.returncode == 0, p.stderr
        times.append(t)
        hooked += [e for e in h.events()[n:] if e.get("event") == "launch"]
        wait_for_hook_rows(h, i + 1, timeout=120)
    rows = wait_for_hook_rows(h, len(times))
    verdicts = [r["details"]["feedback"] for r in rows]
    with capsys.disabled():
        print(f"\nuseless schedule {sid}: cold (run --cold) {['%.3f' % t for t in colds]} s; "
              f"hooked launches {['%.3f' % t for t in times]} (exec to exit {[r['launch_time_s'] for r in rows]}), outcomes {[e['outcome'] for e in hooked]}; "
              f"verdicts {[(v.get('slow'), v.get('action'), v.get('reason')) for v in verdicts]}")
    # it was prefetched: every launch so far went through the replayer
    assert len(hooked) == len(times) and all(e["outcome"] in ("ready", "deadline") for e in hooked), hooked
    assert all(r["prefetched_bytes"] for r in rows), [r["prefetched_bytes"] for r in rows]
    assert not any(v.get("accurate") for v in verdicts), verdicts
    # ... and within 3 launches it is not: out of the index, the next plain launch not hooked
    deadline = time.monotonic() + 30
    while NAME in _index_apps(h) and time.monotonic() < deadline:
        time.sleep(0.5)
    status = h.wsj("hook", "status")
    assert NAME not in status["index"]["apps"], (status, verdicts)
    assert verdicts[-1]["action"] == "stopped", verdicts
    why = status["degraded"][NAME]
    assert "not clearly faster than cold" in why and "no longer prefetched" in why, why
    text = h.ws("hook", "status").stdout
    assert f"degraded: {NAME}: " in text and "not clearly faster than cold" in text, text
    n = len(h.events())
    h.disk.drop_caches()
    _, p = h.plain(NAME)
    assert p.returncode == 0, p.stderr
    time.sleep(1)
    assert not [e for e in h.events()[n:] if e.get("event") == "launch"], "still prefetched after it left the index"
    report = h.ws("report").stdout
    assert f"degraded: {NAME}: " in report and f"stale: {NAME}: " in report, report


def _index_apps(h):
    return set((h.wsj("hook", "status")["index"] or {}).get("apps") or [])
