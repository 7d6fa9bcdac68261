"""Timeline series for figure 1 (CPU, disk, LBAs over one launch), built from what the DB holds.

Two sources:
- a launch row whose details_json carries a "timeline" sampled by `warmstart bench`
  (bench/sampler.py: system CPU and device busy time every few ms, request LBAs from tracefs);
- a recording: its block requests give disk busy intervals and LBAs, and each request's c_i
  (app CPU since the previous completion) is spread over the gap before that request.
"""

from typing import Optional

from ..db import recordings

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
    rec = recordings.get_recording(conn, recording_id)
    if rec is None:
        return None
    reqs = recordings.load_block_requests(conn, recording_id)
    dur_ns = max([int(rec["launch_time_s"] * 1e9)] + [r.complete_ns or r.issue_ns for r in reqs]) or 1
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
    for r in reqs:
        done = r.complete_ns if r.complete_ns is not None else r.issue_ns
        spread_over(r.issue_ns, done, done - r.issue_ns, disk)
        if r.cpu_before_ns:
            spread_over(prev_done, max(r.issue_ns, prev_done + 1), r.cpu_before_ns, cpu)
        prev_done = max(prev_done, done)
    return {"label": f"recorded cold launch (recording {recording_id}), {rec['launch_time_s']:.3f} s",
            "period_s": period_ns / 1e9,
            "cpu": [min(v, 1.0) for v in cpu], "cpu_what": "app CPU (c_i), % of one CPU",
            "disk": [min(v, 1.0) for v in disk],
            "requests": [[r.issue_ns / 1e9, r.sector] for r in reqs],
            "segments_s": [], "dev_sectors": None}


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
            rid = recordings.latest_recording_id(conn, app)
            if rid is not None:
                panels.append(from_recording(conn, rid))
    return [p for p in panels if p]


def recordings_by_app(conn, apps) -> dict:
    return {app: recordings.recording_times(conn, app) for app in apps}
