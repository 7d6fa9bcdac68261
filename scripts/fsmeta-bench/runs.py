"""What the fsmeta-bench scripts that time prefetched launches share: one launch from a cold
cache, and the medians of the launches of each variant."""

import statistics
from types import SimpleNamespace

from warmstart.bench.matrix import make_cold
from warmstart.db import open_db
from warmstart.replay.runner import LaunchOptions, Prefetch, run_launch


def cold_run(emu, db, argv, mode: str = "segmented", name=None) -> dict:
    """One launch of argv on the emulated disk emu (app `name` of the database at db) with its
    schedule prefetched in mode, as the bench measures one: the caches made cold once the
    launch's preparation is done (run_launch's cold callback, the bench's make_cold), after the
    export has looked at the schedule's directories.
    Dropped before `warmstart run` instead, as this did until 2026-11-27, that look read those
    directories' inodes before the launch, unmeasured: on btrfs git's metadata step took 0.08 s
    so, 0.7 s in the bench. The launch's document, as `warmstart run --json` prints it."""
    conn = open_db(db)
    try:
        out = run_launch(conn, list(argv), Prefetch(mode), LaunchOptions(passthrough=False, kill_at_end=False),
                         None, name=name, cold=lambda: make_cold(SimpleNamespace(emu=emu)))
    finally:
        conn.close()
    return out.to_json()


def print_medians(title: str, res) -> None:
    """res: variant label -> rows of numbers; each column's median, per variant."""
    print(f"\nmedians {title}")
    for label, rows in res.items():
        print(f"  {label}: " + " / ".join(f"{statistics.median(col):.3f}" for col in zip(*rows)))
