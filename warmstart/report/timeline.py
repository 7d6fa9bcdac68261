"""Timeline series for figure 1 (CPU, disk, LBAs over one launch), built from what the DB holds.

Two sources:
- a launch row whose details_json carries a "timeline" sampled by `warmstart bench`
  (report/sampler.py: system CPU and device busy time every few ms, request LBAs from tracefs);
- a recording: its block requests give disk busy intervals and LBAs, and each request's c_i
  (app CPU since the previous completion) is spread over the gap before that request.
"""

from typing import Optional

BINS = 400  # resolution of a recording-derived timeline


def from_launch(row: dict) -> Optional[dict]:
    """The sampled timeline of a launch row (a dict from summary.load_launches), or None."""
    tl = (row.get("details") or {}).get("timeline")
    if not tl:
        return None
    return dict(tl, label=f"{row['method']} launch #{row['id']}, {row['launch_time_s']:.3f} s"
                + (f", mechanism {row['mechanism']}" if row.get("mechanism") else ""))


def from_recording(conn, recording_id: int) -> Optional[dict]:
    """A timeline of a recorded (cold) launch from its block requests and c_i."""
    rec = conn.execute("SELECT launch_time_s FROM recordings WHERE id = ?", (recording_id,)).fetchone()
    if rec is None:
        return None
    reqs = conn.execute("SELECT issue_ns, complete_ns, sector, nr_sectors, cpu_before_ns, is_write "
                        "FROM block_requests WHERE recording_id = ? ORDER BY seq", (recording_id,)).fetchall()
    dur_ns = max([int(rec[0] * 1e9)] + [r[1] or r[0] for r in reqs]) or 1
    period_ns = max(dur_ns // BINS, 1_000_000)
    nbins = dur_ns // period_ns + 1
    disk, cpu = [0.0] * nbins, [0.0] * nbins

    def spread_over(lo, hi, amount_ns, acc):
        """Add amount_ns of busy time evenly over [lo, hi) into the bins of acc."""
        if hi <= lo:
            hi = lo + 1
        rate = amount_ns / (hi - lo)
        b = lo // period_ns
        while b * period_ns < hi and b < nbins:
            a, z = max(lo, b * period_ns), min(hi, (b + 1) * period_ns)
            acc[b] += rate * (z - a) / period_ns
            b += 1

    prev_done = 0
    for issue, complete, sector, nr, cpu_ns, _ in reqs:
        done = complete if complete is not None else issue
        spread_over(issue, done, done - issue, disk)
        if cpu_ns:
            spread_over(prev_done, max(issue, prev_done + 1), cpu_ns, cpu)
        prev_done = max(prev_done, done)
    return {"label": f"recorded cold launch (recording {recording_id}), {rec[0]:.3f} s",
            "period_s": period_ns / 1e9,
            "cpu": [min(v, 1.0) for v in cpu], "cpu_what": "app CPU (c_i), % of one CPU",
            "disk": [min(v, 1.0) for v in disk],
            "requests": [[r[0] / 1e9, r[2]] for r in reqs],
            "segments_s": [], "dev_sectors": None}


def latest_recording(conn, app: str) -> Optional[int]:
    row = conn.execute("SELECT r.id FROM recordings r JOIN apps a ON a.id = r.app_id WHERE a.name = ? "
                       "ORDER BY r.started_at DESC, r.id DESC LIMIT 1", (app,)).fetchone()
    return row[0] if row else None


def pick(conn, launches: list, app: str, disk: str, prefetch_method: Optional[str]) -> list:
    """The panels of figure 1 for one app: the cold launch and the prefetched one, each the
    latest with a sampled timeline; a cold panel falls back to the app's latest recording."""
    rows = [r for r in launches if r["app"] == app and r["disk"] == disk]
    panels = []
    for method in ("cold", prefetch_method):
        if not method:
            continue
        sampled = [r for r in rows if r["method"] == method and (r.get("details") or {}).get("timeline")]
        if sampled:
            panels.append(from_launch(sampled[-1]))
        elif method == "cold":
            rid = latest_recording(conn, app)
            if rid is not None:
                panels.append(from_recording(conn, rid))
    return [p for p in panels if p]


def recordings_by_app(conn, apps) -> dict:
    out = {}
    for app in apps:
        out[app] = [r[0] for r in conn.execute(
            "SELECT r.started_at FROM recordings r JOIN apps a ON a.id = r.app_id WHERE a.name = ? "
            "ORDER BY r.started_at", (app,))]
    return out
