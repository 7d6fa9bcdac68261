"""A damaged or hostile database never crashes a command (issue 23, item 6).

A real database (an app recorded with `warmstart record` on the emulated disk and analyzed with
`warmstart analyze`, a hooked launch row stored as the learner stores one) is copied per case and
1-3 of its values are replaced, by a seeded RNG, with what the column must never hold: integers
of the wrong sign or size, reals, text, BLOBs, NULLs, non-canonical or relative paths, broken
JSON. Then `hook refresh`, `analyze`, `export` and `report` run over it, and the learner's
handling of a learned app (its idle analysis and index refresh) and of a relearn verdict.

Every command must end with exit status 0 or a one-line `warmstart: ...` message (a database row
refused names its table and row), never a traceback; the learner must not raise; and nothing
refresh writes (index, exports) may hold a non-canonical path. The commands run in this process
(fast: many cases) and, for the first case and every tenth, as real CLI subprocesses too.

WARMSTART_FUZZ_SECONDS (default 12) is the mutation loop's budget; WARMSTART_FUZZ_SEED its seed.
"""

import contextlib
import io
import json
import os
import random
import re
import resource
import shutil
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from conftest import REPO, have_tracefs, require

APP = "fz"
BUDGET_S = float(os.environ.get("WARMSTART_FUZZ_SECONDS", "12"))
SEED = int(os.environ.get("WARMSTART_FUZZ_SEED", "23"))
SUBPROCESS_EVERY = 10

BAD_PATHS = [b"/tmp/../etc/shadow", b"etc/shadow", b"/a//b", b"/a/./b", b"/a/b/", b"", b"/a\0b", b"..",
             "/str/not/blob"]
BAD_JSON = ["{", "[]", "{}", "null", '"x"', "[[1, 2]]", "[[-1, 0, 4096, 0]]", '[1, "a", null]', "[" * 5000,
            '{"seek_curve": 1}', "1e999"]
BAD_NUMBERS = [-1, -4096, -(1 << 63), (1 << 63) - 1, 1 << 40, 0, 1.5, -0.5, float("inf"), float("nan"), "12",
               "abc", b"\x00\x01", None, 2 ** 62, 2 ** 32, 1 << 20, 1e300, -1e300]


def _bad_value(rng: random.Random, decl: str):
    pool = BAD_NUMBERS + ([p for p in BAD_PATHS] if decl == "BLOB" else []) + \
        (BAD_JSON if decl == "TEXT" else [])
    v = rng.choice(pool)
    if rng.random() < 0.1:
        v = "x" * rng.choice([0, 1, 70000])
    return v


@pytest.fixture(scope="module")
def real_db(tmp_path_factory, emu_hdd):
    """A database made by a real `record` + `analyze` of an app reading files on the emulated disk."""
    require(os.geteuid() == 0 and have_tracefs(), "needs root and tracefs (to record)")
    tmp = tmp_path_factory.mktemp("dbfuzz")
    work = emu_hdd.mountpoint / f"ws-dbfuzz-{os.getpid()}"
    work.mkdir()
    try:
        files = []
        for i in range(3):
            f = work / f"data{i}.bin"
            f.write_bytes(os.urandom(96 * 1024 * (i + 1)))
            files.append(str(f))
        db = tmp / "warmstart.db"
        env = dict(os.environ, PYTHONPATH=str(REPO), WARMSTART_HOOK_ROOT=str(tmp / "unused"))

        def ws(*args):
            p = subprocess.run([sys.executable, "-m", "warmstart", "--db", str(db), *args], env=env,
                               capture_output=True, text=True, errors="replace", timeout=300)
            assert p.returncode == 0, (args, p.stdout, p.stderr)
            return p.stdout
        emu_hdd.drop_caches()
        ws("record", "--name", APP, "--no-warm-run", "--", "/bin/cat", *files)
        ws("analyze", APP, "--json")
        from warmstart.db import open_db
        from warmstart.db.launches import insert_launch
        from warmstart.db.recordings import get_app
        from warmstart.db.schedules import load_active_schedule
        conn = open_db(db)
        sched = load_active_schedule(conn, APP)
        insert_launch(conn, app_id=get_app(conn, APP)["id"], schedule_id=sched.id, mode="hook", launch_time_s=0.2,
                      details={"hit_ratio": 0.9})
        conn.commit()
        conn.close()
        yield db
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _rows(conn):
    """Per table with rows: [(table, rowid, column, declared type)] of each of its values."""
    out = {}
    for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite%'"):
        cols = [(r[1], r[2]) for r in conn.execute(f"PRAGMA table_info({table})")]
        for (rowid,) in conn.execute(f"SELECT rowid FROM {table}"):
            out.setdefault(table, []).extend((table, rowid, c, decl) for c, decl in cols)
    return out


def mutate(src: Path, dst: Path, rng: random.Random, values) -> list:
    shutil.copy(src, dst)
    conn = sqlite3.connect(dst)
    done = []
    for _ in range(rng.randint(1, 3)):
        # a table first (each as likely), then one of its values
        table, rowid, col, decl = rng.choice(values[rng.choice(sorted(values))])
        v = _bad_value(rng, decl)
        try:
            conn.execute(f"UPDATE {table} SET {col} = ? WHERE rowid = ?", (v, rowid))
        except sqlite3.IntegrityError:   # NOT NULL, UNIQUE, CHECK: SQLite itself refuses this one
            continue
        done.append(f"{table}.{col}[{rowid}] = {v!r:.40}")
    conn.commit()
    conn.close()
    return done


COMMANDS = [("hook", "refresh", "--json"), ("analyze", APP, "--json"), ("export", APP, "-o", "{out}"),
            ("report", "--json")]


def run_inproc(db, args):
    """One command as `warmstart` runs it (cli.run_click), here: (exit status, stderr)."""
    from warmstart.cli import cli, run_click
    err, out = io.StringIO(), io.StringIO()
    argv = sys.argv
    sys.argv = ["warmstart", "--db", str(db), *args]
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            try:
                run_click(cli, "warmstart")
                rc = 0
            except SystemExit as e:
                rc = e.code if isinstance(e.code, int) else 1
            except Exception as e:   # what run_click lets through is a traceback for the user
                import traceback
                return "crash", f"Traceback (in process)\n{traceback.format_exc()}{type(e).__name__}"
    finally:
        sys.argv = argv
    return rc, err.getvalue()


def run_cli(db, args, env):
    p = subprocess.run([sys.executable, "-m", "warmstart", "--db", str(db), *args], env=env, capture_output=True,
                       text=True, timeout=300)
    return p.returncode, p.stderr


def verdict(rc, stderr) -> str:
    """'ok', the kind of error (the refused table, or the message's first words), or 'crash'."""
    if rc == "crash" or "Traceback" in stderr or rc not in (0, 1):
        return "crash"
    if rc == 0:
        return "ok"
    lines = [line for line in stderr.splitlines() if line.strip()]
    if len(lines) != 1 or not lines[0].startswith("warmstart: "):
        return "crash"
    m = re.search(r"database table (\w+)", lines[0])
    return f"refused row of {m.group(1)}" if m else "error: " + " ".join(lines[0].split()[1:4])


def canonical(p: bytes) -> bool:
    return p.startswith(b"/") and all(c not in (b"", b".", b"..") for c in p[1:].split(b"/"))


def check_published(tree: Path) -> None:
    """What refresh wrote names only canonical absolute paths (the index's exe, schedule, files)."""
    from warmstart.hook.index import read_index
    for name in ("hook.idx", "hook.daemon.idx"):
        f = tree / "var/lib/warmstart" / name
        if f.exists():
            for e in read_index(os.fsencode(f)).entries:
                for p in (e.exe, e.schedule, *e.files):
                    assert canonical(p), (name, p)


def learner_survives(db, tree, log) -> str:
    """The learner's handling of a learned app over this database: its idle analysis and index
    refresh, and a relearn verdict's refresh. Returns its outcome; raises only if it raised."""
    from warmstart.hook import learner
    from warmstart.hook.config import HookConfig
    from warmstart.hook.layout import HookPaths
    paths = HookPaths(tree, tree / "var/lib/warmstart", tree / "run/warmstart", tree / "etc")
    lr = learner.Learner(str(db), paths, HookConfig(learn="auto", learn_idle_max_s=0.0))
    lr.pending.append((APP, time.monotonic()))
    with contextlib.redirect_stdout(log):
        lr.analyze_when_idle(learner.Idle())
        lr.collect_launches()            # as the loop does: its state loaded, then a relearn verdict
        lr.refresh_due = True
        lr.judge_finished()
    last = json.loads(paths.learner_events.read_text().splitlines()[-1])
    return "analysis failed (logged)" if last.get("error") else "analyzed"


@contextlib.contextmanager
def memory_cap(headroom=3 << 30):
    """An address-space limit over the loop: a value that makes a command allocate without bound
    (a page count of 2^40 once did) is a MemoryError, counted as a crash, not this process killed."""
    with open("/proc/self/status") as f:
        vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    old = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (vm + headroom, old[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, old)


def one_case(real_db, tmp_path, tree, env, rng, values, number, kinds, crashes, learner_log) -> None:
    """Mutate a copy of the database, run the commands and the learner over it, count verdicts."""
    db = tmp_path / "case.db"
    for f in tmp_path.glob("case.db*"):
        f.unlink()
    what = mutate(real_db, db, rng, values)
    runs = [("", run_inproc)]
    if number == 1 or number % SUBPROCESS_EVERY == 0:
        runs.append(("cli ", lambda d, a: run_cli(d, a, env)))
    for how, run in runs:
        for cmd in COMMANDS:
            args = [a.replace("{out}", str(tmp_path / "out.wsched")) for a in cmd]
            rc, stderr = run(db, args)
            v = verdict(rc, stderr)
            kinds[f"{how}{cmd[0]}: {v}"] += 1
            if v == "crash":
                crashes.append((what, how or "in-process", cmd, rc, stderr[-1500:]))
            if cmd[0] == "hook" and v == "ok":
                check_published(tree)
    try:
        kinds["learner: " + learner_survives(db, tree, learner_log)] += 1
    except Exception as e:
        crashes.append((what, "learner", type(e).__name__, str(e)))


def test_a_mutated_database_never_crashes_a_command(real_db, tmp_path, monkeypatch, capsys):
    from warmstart.db import open_db
    conn = open_db(real_db)
    values = _rows(conn)
    conn.close()
    assert set(values) >= {"apps", "recordings", "block_requests", "page_cache_adds", "recording_files",
                           "schedules", "schedule_files", "segments", "schedule_ranges", "launches"}
    tree = tmp_path / "tree"
    tree.mkdir()
    monkeypatch.setenv("WARMSTART_HOOK_ROOT", str(tree))
    env = dict(os.environ, PYTHONPATH=str(REPO), WARMSTART_HOOK_ROOT=str(tree))
    rng = random.Random(SEED)
    kinds, crashes, cases = Counter(), [], 0
    learner_log = io.StringIO()
    deadline = time.monotonic() + BUDGET_S
    with memory_cap():
        while cases < 2 or time.monotonic() < deadline:
            cases += 1
            one_case(real_db, tmp_path, tree, env, rng, values, cases, kinds, crashes, learner_log)
    cli_runs = sum(n for k, n in kinds.items() if k.startswith("cli "))
    with capsys.disabled():
        print(f"\ndatabase fuzz (seed {SEED}, {BUDGET_S:g} s): {cases} cases, {cli_runs} CLI subprocess runs, "
              f"{len(crashes)} crashes")
        for k, n in sorted(kinds.items()):
            print(f"  {n:6d}  {k}")
        for c in crashes:   # what was mutated, where, and the traceback's last frame and line
            frames = re.findall(r'File "([^"]+)", line (\d+)', c[-1]) if len(c) == 5 else []
            last = str(c[-1]).strip().splitlines()[-2:] if len(c) == 5 else [str(c[2:])]
            print("  crash:", c[0], c[1], c[2] if len(c) == 5 else "", frames[-1:] or "", last)
    assert not crashes, crashes[:3]
    assert any("refused row" in k for k in kinds), kinds     # the checks were reached, not bypassed


@pytest.mark.parametrize("table,column,value,where", [
    ("schedule_files", "path", b"/tmp/../etc/shadow", r"table schedule_files, row schedule_id 1, file_no 0"),
    ("schedule_ranges", "file_offset", -4096, r"table schedule_ranges, row schedule_id 1, segment_idx \d+, ord \d+"),
    ("schedule_ranges", "length", "4 KiB", r"table schedule_ranges, row schedule_id 1, segment_idx \d+, ord \d+"),
    ("apps", "executable", b"usr/bin/cat", r"table apps, row id 1"),
])
def test_the_issues_values_are_refused_in_one_line(real_db, tmp_path, table, column, value, where):
    """Issue 23's reproductions: a negative file offset (was struct.error), a length stored as text
    (TypeError), a non-canonical path (written into the export and the index's watched files):
    `hook refresh` and `export` now refuse the row in one line naming it, and publish nothing."""
    db = tmp_path / "w.db"
    shutil.copy(real_db, db)
    conn = sqlite3.connect(db)
    files_only = " WHERE file_no IS NOT NULL" if table == "schedule_ranges" else ""
    key = f"rowid = (SELECT min(rowid) FROM {table}{files_only})"
    assert conn.execute(f"UPDATE {table} SET {column} = ? WHERE {key}", (value,)).rowcount == 1
    conn.commit()
    conn.close()
    tree = tmp_path / "tree"
    env = dict(os.environ, PYTHONPATH=str(REPO), WARMSTART_HOOK_ROOT=str(tree))
    for args in (["hook", "refresh"], ["export", APP, "-o", str(tmp_path / "x.wsched")]):
        rc, stderr = run_cli(db, args, env)
        assert rc == 1 and "Traceback" not in stderr, stderr
        [line] = stderr.splitlines()
        assert re.match(f"warmstart: database {where}: {column} = ", line) and "warmstart forget" in line, line
    assert not (tree / "var/lib/warmstart/hook.idx").exists()
    assert not list(tree.glob("var/lib/warmstart/schedules/*.wsr"))
    _forget_clears_it(db, env)


def _forget_clears_it(db, env):
    """The fix the refusal names works: `forget` removes the app (it reads none of its values), and
    the commands run again."""
    rc, stderr = run_cli(db, ["forget", APP], env)
    assert rc == 0, stderr
    for args in (["hook", "refresh"], ["recordings"]):
        rc, stderr = run_cli(db, args, env)
        assert rc == 0, (args, stderr)


@pytest.mark.parametrize("value", [(1 << 63) - 1, -1])
def test_a_request_size_out_of_range_is_refused_not_overflowed(real_db, tmp_path, value):
    """Found by the mutation loop above (CI, seed 23): block_requests.nr_sectors = 2^63 - 1 crashed
    `analyze` and `recordings` with sqlite3's "integer overflow" in the recordings' read total,
    before any row check ran. Now the request row is refused in one line, and `forget` clears it."""
    db = tmp_path / "w.db"
    shutil.copy(real_db, db)
    conn = sqlite3.connect(db)
    assert conn.execute("UPDATE block_requests SET nr_sectors = ? WHERE rowid = (SELECT min(rowid) FROM "
                        "block_requests WHERE NOT is_write)", (value,)).rowcount == 1
    conn.commit()
    conn.close()
    env = dict(os.environ, PYTHONPATH=str(REPO), WARMSTART_HOOK_ROOT=str(tmp_path / "tree"))
    rc, stderr = run_cli(db, ["analyze", APP], env)   # its progress lines, then the refusal
    assert rc == 1 and "Traceback" not in stderr, stderr
    assert re.match(r"warmstart: database table block_requests, row recording_id 1, seq \d+: nr_sectors = ",
                    stderr.splitlines()[-1]), stderr
    rc, stderr = run_cli(db, ["recordings"], env)     # a listing: the total shown, whatever it is
    assert rc == 0, stderr
    _forget_clears_it(db, env)


def test_the_learner_survives_any_exception_in_one_launchs_handling(tmp_path, monkeypatch, capsys):
    """A bug (any exception, not only WarmstartError/OSError) in one learned app's analysis, in a
    learning request or in the index refresh after a verdict is logged; the learner goes on."""
    from warmstart.analyzer import analyze as analyze_mod
    from warmstart.db import open_db
    from warmstart.hook import learner, manage
    from warmstart.hook.config import HookConfig
    from warmstart.hook.layout import HookPaths
    open_db(tmp_path / "w.db").close()
    paths = HookPaths(tmp_path, tmp_path / "state", tmp_path / "run", tmp_path / "etc")
    paths.state.mkdir()
    lr = learner.Learner(str(tmp_path / "w.db"), paths, HookConfig(learn="auto", learn_idle_max_s=0.0))

    def boom(*a, **k):
        raise ZeroDivisionError("a bug")
    monkeypatch.setattr(analyze_mod, "analyze", boom)
    monkeypatch.setattr(manage, "refresh", boom)
    monkeypatch.setattr(lr, "decide", boom)
    lr.pending.append(("auto-x-1", time.monotonic()))
    lr.analyze_when_idle(learner.Idle())                 # raised ZeroDivisionError before
    lr.collect_launches()
    lr.refresh_due = True
    lr.judge_finished()
    ours, theirs = __import__("socket").socketpair()
    theirs.sendall(b"LEARN %d 1 2 3 4 1\n/bin/x\0/bin/x\0" % os.getpid())
    lr.handle(ours)                                      # declined, not raised
    assert theirs.recv(1) == b""
    lr.guarded("a step", boom)
    out = capsys.readouterr().out
    assert "analysis of auto-x-1 failed: ZeroDivisionError: a bug" in out
    assert "hook index not refreshed after a verdict that changed the app's schedule: ZeroDivisionError" in out
    assert "declined: ZeroDivisionError" in out and "a step failed: ZeroDivisionError" in out
    assert json.loads(paths.learner_events.read_text().splitlines()[-1])["error"] == "ZeroDivisionError: a bug"
