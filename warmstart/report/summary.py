"""Per-app launch statistics read from the `launches` table: what `warmstart report` prints.

One summary per (app, disk): launch times on an emulated HDD and on the real disk must never be
pooled into one median. The "prefetched" column is the app's best-supported prefetch method:
segmented if it was measured, else reorder, else interleave (overridable).
"""

import json
import time
from typing import Iterable, Optional, Sequence

from ..analyzer.bound import launch_bound
from ..db import launches, recordings
from ..errors import WarmstartError
from . import stats

# Display order of launch methods (also the bars of the normalised figure, like the paper's Fig. 3).
METHOD_ORDER = ("cold", "cold-traced", "interleave", "reorder", "reorder-ours", "segmented-paper", "segmented",
                "hook", "warm")
# hook first: where an app has plain hooked launches, they are what its user gets
PREFETCH_PREFERENCE = ("hook", "segmented", "segmented-paper", "reorder-ours", "reorder", "interleave")
NOT_PREFETCHED = ("cold", "cold-traced", "warm", "none")


def method_of(mode: str, algorithm: Optional[str]) -> str:
    """The launch method a row measured: its mode, with segmented split by the schedule's algorithm
    (the paper's Algorithm 1 vs ours), so bench can compare both from the same table."""
    if mode == "segmented" and algorithm == "paper":
        return "segmented-paper"
    if mode == "reorder" and algorithm not in (None, "reorder"):
        return "reorder-ours"   # a segmented schedule fetched whole: shaped requests, no pipelining
    return mode


def load_launches(conn, names: Sequence[str] = (), bench_id: Optional[str] = None,
                  disk: Optional[str] = None) -> list:
    """Launch rows (as dicts, with app name, method, schedule facts) matching the filters."""
    if names:
        known = {r["name"] for r in recordings.list_apps(conn)}
        missing = [n for n in names if n not in known]
        if missing:
            raise WarmstartError(f"no app named {', '.join(missing)} in the database: "
                                 f"see `warmstart report` without names for the recorded apps")
    rows = launches.report_rows(conn, names, bench_id, disk)
    out = []
    for r in rows:
        d = dict(r)
        d["disk"] = d["disk"] or "unknown"
        d["method"] = method_of(d["mode"], d["algorithm"])
        try:
            d["details"] = json.loads(d.pop("details_json") or "{}")
        except ValueError:
            d["details"] = {}
        out.append(d)
    return out


RECORDED_COLD = "recorded cold launches (caches dropped; includes the tracing overhead)"


def disk_label(env: dict, main_dev: Optional[int] = None) -> Optional[str]:
    """A short name of the block device a recording read most from: 'loop3 hdd' (rotational)
    or 'vda ssd' (not), as the kernel reports it."""
    devices = env.get("devices") or []
    for d in sorted(devices, key=lambda d: d.get("dev") != main_dev):
        if d.get("name"):
            kind = {True: "hdd", False: "ssd"}.get(d.get("rotational"))
            return f"{d['name']} {kind}" if kind else d["name"]
    return None


def recorded_cold(conn, names: Sequence[str] = ()) -> dict:
    """app -> {"times": [s, ...], "disk": label}: each app's recordings as its cold reference."""
    out = {}
    for r in recordings.cold_recordings(conn, names):
        try:
            env = json.loads(r["env_json"] or "{}")
        except ValueError:
            env = {}
        ref = out.setdefault(r["app_name"], {"times": [], "disk": None})
        ref["times"].append(r["launch_time_s"])
        ref["disk"] = disk_label(env, r["main_dev"]) or ref["disk"]
    return out


def name_unknown_disks(launches: list, recorded: dict) -> None:
    """Launches stored without a disk name (`warmstart run`, hooked launches) ran the app's own
    files, on the device its recordings read from: name that device instead of 'unknown'."""
    for row in launches:
        if row["disk"] == "unknown" and (recorded.get(row["app"]) or {}).get("disk"):
            row["disk"] = recorded[row["app"]]["disk"]


def unprefetched(row: dict) -> bool:
    """A prefetch-mode launch the runner had to start without prefetching (it says why in
    details.notes): timing it as 'segmented' would credit the prefetcher with a plain launch."""
    return row["mode"] not in NOT_PREFETCHED and bool((row.get("details") or {}).get("notes"))


def timed(row: dict) -> bool:
    """The launch has an exact time (hooked launches may not: launch_time_s NULL, with the reason
    in details "not_timed"); one without never enters a median, a gain or a history."""
    return row.get("launch_time_s") is not None


def not_timed_reason(row: dict) -> str:
    return (row.get("details") or {}).get("not_timed") or "no exact time"


def _sum(values: Iterable) -> Optional[int]:
    v = [x for x in values if x is not None]
    return sum(v) if v else None


def summarize(launches: list, prefetch_method: Optional[str] = None, now: Optional[float] = None,
              recorded: Optional[dict] = None, sorted_passes: Optional[dict] = None) -> list:
    """One dict per (app, disk) with medians/spreads per method and the derived gains.

    `sorted_passes` ((app, disk, bench id) -> latest_sorted_passes row) gives a group the parts
    of its lower bound measured in a bench run whose launches are in the group (never another
    run's): bound_s = analyzer.bound.launch_bound(cut bound, that run's fastest warm launch, the
    sorted pass of its schedule's reads); warm_or_raw_pass_s = max(that run's warm median, the raw
    pass), what older runs called LB.

    `recorded` (from recorded_cold) is the cold reference of an (app, disk) with no cold launch
    of its own, on the disk its recordings read from; an app with recordings and no launches
    yet gets a row of its cold time alone.

    Only launches that ran correctly (exit status 0 or unknown) and, in a prefetch mode, were
    really prefetched count towards times; the others are counted as failed_launches so a broken
    mode cannot look fast."""
    now = time.time() if now is None else now
    recorded = recorded or {}
    return [_summarize_group(app, disk, rows, prefetch_method, now, recorded.get(app),
                             _own_pass(sorted_passes or {}, app, disk, rows))
            for (app, disk), rows in sorted(_groups(launches, recorded).items())]


def _own_pass(passes: dict, app: str, disk: str, rows: list) -> Optional[dict]:
    """The latest sorted pass of (app, disk) measured in a bench run that these launches are from."""
    own = [passes[(app, disk, b)] for b in {r["bench_id"] for r in rows if r["bench_id"]} if (app, disk, b) in passes]
    return max(own, key=lambda p: (p["measured_at"], p["id"])) if own else None


def _bound(sp: Optional[dict], rows: list) -> dict:
    """The lower bound of the group from its own bench run's parts and that run's warm launches."""
    if not sp:
        return {"bound_s": None, "warm_or_raw_pass_s": None, "raw_pass_s": None, "schedule_pass_s": None,
                "cut_bound_s": None}
    warm = stats.spread(r["launch_time_s"] for r in rows
                        if r["method"] == "warm" and r["bench_id"] == sp["bench_id"] and r["exit_status"] in (0, None))
    return {"bound_s": launch_bound(sp.get("cut_bound_s"), warm.min if warm else None, sp.get("schedule_pass_s"),
                                    sp.get("cut_fetch_s")),
            "warm_or_raw_pass_s": stats.warm_or_raw_pass(warm.median, sp["seconds"]) if warm else None,
            "raw_pass_s": sp["seconds"], "schedule_pass_s": sp.get("schedule_pass_s"),
            "cut_bound_s": sp.get("cut_bound_s")}


def _groups(launches: list, recorded: dict) -> dict:
    """(app, disk) -> its launches; an app with recordings and no launches: an empty group on the
    disk its recordings read from."""
    groups = {}
    for row in launches:
        groups.setdefault((row["app"], row["disk"]), []).append(row)
    for app, ref in recorded.items():
        if not any(a == app for a, _ in groups):
            groups[(app, ref["disk"] or "unknown")] = []
    return groups


def _method_times(by_method: dict, disk: str, ref: Optional[dict]):
    """(method -> spread of its launch times in METHOD_ORDER, where the cold times come from):
    without cold launches, the recordings' cold times on this disk (RECORDED_COLD)."""
    methods = {}
    for m in sorted(by_method, key=lambda m: (METHOD_ORDER.index(m) if m in METHOD_ORDER else 99, m)):
        s = stats.spread(r["launch_time_s"] for r in by_method[m] if timed(r))
        if s is not None:   # a method whose launches have no exact time has no times
            methods[m] = s
    cold_source = "cold launches" if "cold" in methods else None
    if cold_source is None and ref and (ref["disk"] or "unknown") == disk:
        methods = {"cold": stats.spread(ref["times"]), **methods}
        cold_source = RECORDED_COLD
    return methods, cold_source


def _med(s) -> Optional[float]:
    return s.median if s else None


def _summarize_group(app: str, disk: str, rows: list, prefetch_method: Optional[str], now: float,
                     ref: Optional[dict], sp: Optional[dict]) -> dict:
    """summarize()'s dict for one (app, disk): ref its recorded cold times, sp its sorted pass."""
    ok = [r for r in rows if r["exit_status"] in (0, None) and not unprefetched(r)]
    untimed = [r for r in ok if not timed(r)]
    by_method = {}
    for r in ok:
        by_method.setdefault(r["method"], []).append(r)
    methods, cold_source = _method_times(by_method, disk, ref)
    cold, warm = methods.get("cold"), methods.get("warm")
    pm = prefetch_method or next((m for m in PREFETCH_PREFERENCE if m in methods),
                                 next((m for m in methods if m not in NOT_PREFETCHED), None))
    pref = methods.get(pm) if pm else None
    prow = by_method.get(pm, [])
    latest = prow[-1] if prow else None
    return {
        "app": app,
        "disk": disk,
        "launches": len(rows),
        "failed_launches": len(rows) - len(ok),
        "not_timed": len(untimed),
        "not_timed_reason": not_timed_reason(untimed[-1]) if untimed else None,
        "bench_ids": sorted({r["bench_id"] for r in rows if r["bench_id"]}),
        "methods": {m: dict(s.as_dict(), ratio_to_cold=stats.ratio(s.median, _med(cold)))
                    for m, s in methods.items()},
        "prefetch_method": pm,
        "cold": cold.as_dict() if cold else None,
        "cold_source": cold_source,
        "prefetched": pref.as_dict() if pref else None,
        "warm": warm.as_dict() if warm else None,
        "gain": stats.gain(_med(pref), _med(cold)),
        **_bound(sp, rows),
        "captured": stats.captured(_med(cold), _med(pref), _med(warm)),
        "t_exp_s": latest["t_exp_s"] if latest else None,
        "t_exp_error": stats.estimate_error(_med(pref), latest["t_exp_s"]) if latest else None,
        **_page_use(prow),
        **_schedule_state(latest, now),
    }


def _page_use(prow: list) -> dict:
    """The prefetch method's bytes fetched (median), accuracy and waste over its launches."""
    # waste only over launches whose use was measured (run_launch's Prefetch.measure_use): there
    # prefetched_bytes counts the same file pages prefetched_used_bytes is part of
    prefetched_bytes = _sum(r["prefetched_bytes"] for r in prow if r["prefetched_used_bytes"] is not None)
    used = _sum(r["used_bytes"] for r in prow)
    pused = _sum(r["prefetched_used_bytes"] for r in prow)
    return {
        "prefetched_bytes_median": _med(stats.spread(r["prefetched_bytes"] for r in prow
                                                     if r["prefetched_bytes"] is not None)),
        "accuracy": stats.share(pused, used),
        "waste": stats.share(None if prefetched_bytes is None or pused is None
                             else prefetched_bytes - pused, prefetched_bytes),
    }


def _schedule_state(latest: Optional[dict], now: float) -> dict:
    """The schedule and mechanism of the prefetch method's latest launch: its age, staleness."""
    return {
        "schedule_id": latest["schedule_id"] if latest else None,
        "schedule_age_s": (now - latest["schedule_created_at"])
        if latest and latest["schedule_created_at"] is not None else None,
        "schedule_stale": bool(latest["schedule_stale"]) if latest and latest["schedule_stale"] is not None else None,
        "schedule_stale_reason": latest["schedule_stale_reason"] if latest and latest["schedule_stale"] else None,
        "mechanism": latest["mechanism"] if latest else None,
    }
