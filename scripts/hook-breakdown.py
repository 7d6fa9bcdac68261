#!/usr/bin/env python3
"""Where a bench run's hooked launches spent their time (issue 25: interleaving), per app.

From the replayer statistics stored with each hooked launch row of one bench run (`warmstart
bench` writes them; docs/replayer.md has the fields): the median over the app's segmented
launches (those of its schedule fetched whole are counted apart) of
  launch     exec to exit, the launch time the bench reports;
  release    the pre-buffer: from the replay's start to the app's release (t_prebuffer_ns);
  seg 1      segment 1's share of the bytes the schedule fetched (the rest is fetched beside the app);
  app CPU    the app's own CPU time (user + system, all its threads and children);
  waited     the time the released app waited on the disk (the replayer's app watch);
  runq       the time it waited for a CPU (the watch's run delays; "-" from a replayer without);
  rest       launch - release - app CPU: what neither the pre-buffer nor the app's CPU explains
             (the waits above are in it, and the time from the exec to the replay's start).
A launch with rest near 0 ran its CPU after the pre-buffer, in series: interleaving hid nothing
more than what the later segments took.

  python3 scripts/hook-breakdown.py [--db /var/lib/warmstart/bench.db] BENCH_ID [--json]
"""

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def breakdown(conn, bench_id: str) -> dict:
    from warmstart.bench.matrix import launch_cpu_s
    from warmstart.db.launches import list_launches
    from warmstart.db.recordings import list_apps
    from warmstart.hook.feedback import app_wait
    names = {a["id"]: a["name"] for a in list_apps(conn)}
    per_app: dict = {}
    for row in list_launches(conn, mode="hook", bench_id=bench_id):
        r = row["details"].get("replay") or {}
        segs = r.get("segments") or []
        total = sum(s["bytes"] for s in segs)
        cpu = launch_cpu_s(row)
        if row["launch_time_s"] is None or not total or cpu is None or "t_prebuffer_ns" not in r:
            continue
        w = app_wait(r) or {}
        kind = "segmented" if len(segs) > 1 else "whole"
        per_app.setdefault(names.get(row["app_id"], str(row["app_id"])), {}).setdefault(kind, []).append({
            "launch_s": row["launch_time_s"], "release_s": r["t_prebuffer_ns"] / 1e9,
            "seg1_share": segs[0]["bytes"] / total, "app_cpu_s": cpu,
            "waited_s": w.get("waited_s", 0.0), "runq_s": w.get("runq_s")})
    out = {}
    for app, kinds in sorted(per_app.items()):
        out[app] = {}
        for kind, xs in kinds.items():
            med = {k: statistics.median(x[k] for x in xs) if all(x[k] is not None for x in xs) else None
                   for k in xs[0]}
            med["rest_s"] = statistics.median(x["launch_s"] - x["release_s"] - x["app_cpu_s"] for x in xs)
            out[app][kind] = dict(med, n=len(xs))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bench_id")
    ap.add_argument("--db", default="/var/lib/warmstart/bench.db")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    from warmstart.db.connection import open_db
    conn = open_db(a.db)
    out = breakdown(conn, a.bench_id)
    if not out:
        print(f"no hooked launch with replayer statistics in bench run {a.bench_id} of {a.db}: "
              f"run `warmstart bench --modes ...,hook`", file=sys.stderr)
        return 1
    if a.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"{'app':24s} {'schedule':9s} {'n':>2s} {'launch':>7s} {'release':>8s} {'seg 1':>6s} "
          f"{'app CPU':>8s} {'waited':>7s} {'runq':>6s} {'rest':>7s}")
    for app, kinds in out.items():
        for kind, m in kinds.items():
            print(f"{app:24s} {kind:9s} {m['n']:2d} {m['launch_s']:7.3f} {m['release_s']:8.3f} "
                  f"{m['seg1_share']:6.0%} {m['app_cpu_s']:8.3f} {m['waited_s']:7.3f} "
                  f"{'-' if m['runq_s'] is None else format(m['runq_s'], '.3f'):>6s} {m['rest_s']:+7.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
