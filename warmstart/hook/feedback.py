"""Accuracy feedback for hooked launches: a `launches` row (mode "hook") per launch, a verdict on
the schedule, and what to do when verdicts stay bad (docs/hook.md, "Accuracy feedback").

The verdict is taken at the launch's exit, by the replayer (`--judge-at-exit`, replayer/
exitcheck.c), never from the page cache some time later, which a cache drop or a memory hog
may have emptied meanwhile:
  prefetched  = the replayer's bytes_fetched
  missed      = bytes of the scheduled files resident OUTSIDE the scheduled ranges at the exit,
                less those resident there when the replay first opened the file (pages of
                shared libraries that running processes keep mapped): the launch read them
                and the schedule did not have them
  hit ratio   = scheduled bytes resident / (that + missed), at the exit
A launch is stored but NOT judged when its measurement cannot be trusted: no measurement at the
exit, over half the schedule was cached before the replay (a warm launch), pages of the
schedule were evicted during the launch (cachestat's recently evicted), or less than half of
what the replay made resident was still there at the exit (the cache was dropped).

The launch's exact time (exec to exit) is compared with the app's cold launches (at its own CPU
time where the replayer's watch and the cold launches have one) and the schedule's t_exp
(time_verdict): a launch not clearly faster than cold, or far above t_exp, is
bad too, and never "accurate". A launch without an exact time (the app still running when the
replayer stopped waiting, no report) is stored with launch_time_s NULL and the reason
(details "not_timed"): no placeholder ever enters a median, a gain or a history.

Only `stale_after_bad` consecutive bad verdicts act: with learn = "auto" the schedule is marked
stale and the app re-learned on its next launch; with learn = "off" it keeps being prefetched
and is shown as degraded, with the reason, in `hook status` and `report` -- unless those
launches were not clearly faster than cold: then it is marked stale with learn = "off" too and
leaves the index (action "stopped"), which `hook status` and `report` say.
A comparable launch (timed, alone, cold, its pages kept) of a segmented schedule also drives the
segmented-or-whole trial (hook/trial.py): verdict "trial".
Limits: reads of files outside the schedule are not seen; a prefetched page the app never
touched cannot be told from a used one, so this is coverage of the launch's reads, kept in the
verdict: the launches row's used and prefetched-and-used columns stay empty for hook rows.
"""

import json
import statistics
from typing import Dict, List, Optional, Sequence, Tuple

from ..db import launches
from ..db.recordings import cold_recordings, get_app_by_id
from ..db.schedules import app_of_schedule, mark_stale, schedule_t_exp, trial_schedules
from . import trial

MIB = 1 << 20


def measure(stats: Optional[dict]) -> Tuple[Optional[dict], Optional[str]]:
    """(the exit measurement, None) or (None, why this launch cannot be judged)."""
    stats = stats or {}
    x = stats.get("exit")
    if not stats:
        return None, "the replayer left no report (it was refused or killed)"
    if not x or not x.get("asked"):
        return None, "no measurement at the exit (replayer without --judge-at-exit)"
    if _warm(stats):
        return None, "over half the schedule was cached before the replay (a warm launch)"
    lost = cache_lost(stats, x)
    return (None, lost) if lost else (x, None)


def cache_lost(stats: dict, x: dict, raw_unseen: bool = False) -> Optional[str]:
    """Why the prefetched pages were lost during the launch (memory pressure; the cache dropped),
    or None. raw_unseen: a schedule of raw block-device ranges only is none of the exit check's
    files, so its pages missing there proves nothing: only eviction counts then."""
    scheduled = stats.get("bytes_scheduled") or 0
    made_resident = (stats.get("bytes_fetched") or 0) + (stats.get("bytes_resident") or 0)
    inside = x.get("scheduled_resident_bytes") or 0
    evicted_pages = x.get("recently_evicted_pages") or 0
    if evicted_pages * 4096 > max(MIB, scheduled // 100):
        return f"{evicted_pages} pages of the schedule were evicted during the launch (memory pressure)"
    all_raw = bool(stats.get("ranges_total")) and (stats.get("device_ranges") or 0) >= stats["ranges_total"]
    if made_resident and inside < made_resident / 2 and not (raw_unseen and all_raw):
        return (f"only {inside // MIB} of the {made_resident // MIB} MiB the replay made resident "
                f"were still cached at the exit (the cache was dropped or evicted)")
    return None


def _verdict(x: dict, threshold: float, previous_missed: List[int]) -> dict:
    covered, missed = x["scheduled_resident_bytes"], x["missed_bytes"]
    hit = covered / (covered + missed) if covered + missed else None
    prev = sorted(previous_missed[-5:])
    baseline = prev[len(prev) // 2] if prev else None
    grew = baseline is not None and missed > max(2 * baseline, baseline + 4 * MIB)
    bad = hit is not None and (hit < threshold or grew)
    reason = None
    if bad:
        reason = (f"hit ratio {hit:.0%} below {threshold:.0%}" if hit < threshold else
                  f"misses grew to {missed} B (median before {baseline} B)")
    return {"hit_ratio": hit, "missed_bytes": missed, "scheduled_resident_bytes": covered,
            "files_checked": x.get("files_checked"), "missed_baseline_bytes": baseline,
            "bad": bad, "reason": reason}


# A hooked launch's exact time against the app's cold launches (docs/hook.md, "Never slower than
# no prefetch"): "clearly faster" means faster than the cold median by more than the cold
# launches' noise: CLEAR_SDS robust standard deviations (1.4826 x their median absolute
# deviation), at least MIN_MARGIN and at most MAX_MARGIN of the median.
CLEAR_SDS = 2.0
MIN_MARGIN = 0.05
MAX_MARGIN = 0.20
COLD_LAUNCHES = 5   # the latest plain cold launches and the latest cold recordings, each at most


def exact_time(event: dict, stats: Optional[dict]) -> Tuple[Optional[float], Optional[str]]:
    """(the launch's exact time, None), exec (the daemon's clock) to the exit (the replayer's
    pidfd), both CLOCK_MONOTONIC; or (None, why it has none). Never a placeholder."""
    x = (stats or {}).get("exit") or {}
    if not stats:
        return None, "the replayer left no report (it was refused or killed)"
    if not x.get("asked"):
        return None, "the replayer did not wait for the exit (started without --judge-at-exit)"
    if not x.get("exited"):
        return None, ("the app was still running when the replayer stopped waiting for its exit "
                      "(a long-running app): no launch time")
    if not event.get("t_exec") or x.get("t_measured") is None:
        return None, "the daemon's record has no exec time"
    t = x["t_measured"] - event["t_exec"]
    if t < 0:
        return None, f"the exit was seen {-t:.3f} s before the exec (clocks disagree)"
    return t, None


def cold_reference(conn, app_id: int) -> Optional[dict]:
    """The app's cold launch times (caches dropped before each), their median and the margin a
    launch must beat it by; None without any. Its latest plain cold launches (`run --cold`,
    bench) if it has some: a recording's time includes the tracing overhead (measured on the
    emulated HDD: 2.6 s recorded, 1.9 s plain), which would make any launch look faster; else
    its latest cold recordings."""
    cold = launches.last_cold_launches(conn, app_id, COLD_LAUNCHES)
    if cold:
        return summarize_cold(cold, "plain cold launches")
    app = get_app_by_id(conn, app_id)
    return summarize_cold([(r["launch_time_s"], None) for r in cold_recordings(conn, [app["name"]])
                           if r["launch_time_s"]][-COLD_LAUNCHES:], "cold recordings")


def summarize_cold(cold: Sequence[Tuple[float, Optional[float]]], source: str) -> Optional[dict]:
    """cold_reference's figures from cold launches as (launch time, the app's CPU time or None):
    their median, the margin, and where every one has its CPU time, the median and spread of
    their times off the CPU (time_verdict); None without any."""
    times = [t for t, _ in cold]
    if not times:
        return None
    med = statistics.median(times)
    out = {"median_s": med, "n": len(times), "margin_s": _margin(_sd(times), med), "source": source}
    off = [t - c for t, c in cold if c is not None]
    if off and len(off) == len(cold):
        out.update(off_cpu_median_s=statistics.median(off), off_cpu_sd_s=_sd(off))
    return out


def _sd(values: List[float]) -> float:
    """The values' spread: 1.4826 x their median absolute deviation (a standard deviation that
    one outlier does not move)."""
    med = statistics.median(values)
    return 1.4826 * statistics.median(abs(v - med) for v in values)


def _margin(sd: float, ref: float) -> float:
    """What a launch must beat a cold reference ref by: CLEAR_SDS of the cold launches' spread
    sd, at least MIN_MARGIN and at most MAX_MARGIN of ref."""
    return min(max(CLEAR_SDS * sd, MIN_MARGIN * ref), MAX_MARGIN * ref)


def time_verdict(launch_s: float, cold: Optional[dict], t_exp: Optional[float], t_exp_note: str = "",
                 cpu_s: Optional[float] = None) -> dict:
    """The launch's time against cold and against the schedule's t_exp:
    slow: not clearly faster than cold (launch_s > cold median - margin); where the launch's CPU
      time (cpu_s) and every cold launch's are known, cold at its CPU: the cold launches' median
      time off the CPU (time - CPU time) plus cpu_s, the margin from the spread of those times
      off the CPU (a prefetch changes the time an app waits, not the CPU it needs; a host whose
      CPU speed varies moves a CPU-bound app's launch by more than any prefetch does);
    over_t_exp: kept less than half the gain the schedule promised (launch_s > (t_exp + cold) / 2,
    and more than the margin above t_exp). t_exp_note: said after t_exp in the reason."""
    if cold is None:
        return {"slow": None, "over_t_exp": None, "time_reason": "no cold launch to compare with "
                "(no cold recording or `warmstart run --cold` of the app)"}
    med, margin = cold["median_s"], cold["margin_s"]
    ref, ref_margin, at_cpu = med, margin, cpu_s is not None and cold.get("off_cpu_median_s") is not None
    if at_cpu:
        ref = cold["off_cpu_median_s"] + cpu_s
        ref_margin = _margin(cold["off_cpu_sd_s"], ref)
    slow = launch_s > ref - ref_margin
    over = (t_exp is not None and t_exp > 0 and med - t_exp > margin
            and launch_s > (t_exp + med) / 2 and launch_s - t_exp > margin)
    reason = None
    if slow and at_cpu:
        reason = (f"launch {launch_s:.3f} s not clearly faster than cold at its CPU ({ref:.3f} s: "
                  f"{cold['off_cpu_median_s']:.3f} s off the CPU, median of {cold['n']} {cold.get('source')}, "
                  f"+ its {cpu_s:.3f} s of CPU; needs {ref_margin:.3f} s less; cold {med:.3f} s)")
    elif slow:
        reason = (f"launch {launch_s:.3f} s not clearly faster than cold ({med:.3f} s, median of {cold['n']} "
                  f"{cold.get('source', 'cold launches')}; needs {margin:.3f} s less)")
    elif over:
        reason = (f"launch {launch_s:.3f} s far above t_exp {t_exp:.3f} s{t_exp_note} (kept less than half "
                  f"the predicted gain on cold {med:.3f} s)")
    return {"slow": slow, "over_t_exp": over, "time_reason": reason,
            **({"cold_at_cpu_s": ref} if at_cpu else {})}


def expected_time(t_exp: Optional[Tuple[float, float]], stats: Optional[dict]) -> Optional[float]:
    """The schedule's t_exp with its modelled metadata step before the first segment's data (XFS,
    btrfs: db.schedules.schedule_t_exp) replaced by that step as this launch's replayer measured
    it (`t_meta_prebuffer_ns`; `t_meta_ns`, the whole step, from a replayer that ran it all
    first; a schedule analyzed before the step was modelled has none inside): the model counts
    the launch's own metadata reads, the step reads in an order and an amount it cannot know
    (docs/algorithms.md); the comparison with cold judges the step's cost, this one the rest of
    the prediction."""
    if t_exp is None:
        return None
    t, step = t_exp
    stats = stats or {}
    measured = stats.get("t_meta_prebuffer_ns", stats.get("t_meta_ns"))
    return t if measured is None else t - step + measured / 1e9


def app_wait(stats: Optional[dict]) -> Optional[dict]:
    """When the released app waited on the disk (the replayer's `app_wait`, replayer/appwatch.c):
    seconds in all, per segment the replay was submitting then, after the replay, and the kernel
    function it waited in most often; how long it waited for a CPU (runq_s; None from a
    replayer that did not count it) and its CPU time (cpu_s: the most the watch saw, None where it
    saw none or stopped before the exit); None where the replayer did not watch (no --pid)."""
    w = (stats or {}).get("app_wait")
    if not w:
        return None
    named = {k: v for k, v in (w.get("wchan") or {}).items() if k != "other"}
    return {"waited_s": w["waited_ns"] / 1e9, "segments_s": [x / 1e9 for x in w.get("segments_ns") or []],
            "after_s": (w.get("after_ns") or 0) / 1e9, "mostly_in": max(named, key=named.get) if named else None,
            "runq_s": w["runq_ns"] / 1e9 if "runq_ns" in w else None,
            # its CPU time, where the watch followed it to its exit (a replayer before 2026-12-03: None)
            "cpu_s": w["app_cpu_ns"] / 1e9 if w.get("app_cpu_ns") and not w.get("capped") else None}


def judged_history(conn, app_id: int, schedule_id: Optional[int] = None) -> List[dict]:
    """The verdicts of this app's hooked launches (of one schedule and the other of its
    segmented-or-whole trial, if given: db.schedules.trial_schedules) that had one: judged by hit
    ratio, or timed against cold; oldest first. The trial moves the app between its two schedules
    launch by launch: apart, neither streak would reach stale_after_bad in time."""
    ids = None if schedule_id is None else set(trial_schedules(conn, schedule_id))
    return [l["details"]["feedback"] for l in launches.list_launches(conn, app_id=app_id, mode="hook")
            if (ids is None or l["schedule_id"] in ids)
            and _has_verdict(l["details"].get("feedback") or {})]


def _has_verdict(v: dict) -> bool:
    return bool(v.get("judged")) or v.get("slow") is not None


def bad_streak(history: List[dict]) -> int:
    """How many of the latest verdicts in a row were bad (for any reason)."""
    n = 0
    for v in reversed(history):
        if not v.get("bad"):
            break
        n += 1
    return n


def slow_streak(history: List[dict]) -> int:
    """How many of the latest timed launches in a row were not clearly faster than cold (launches
    without a time verdict neither count nor reset it)."""
    n = 0
    for v in reversed(history):
        if v.get("slow") is None:
            continue
        if not v["slow"]:
            break
        n += 1
    return n


def stored(conn, event: dict) -> Optional[Tuple[int, dict]]:
    """The launches row already stored for this hooked launch, as (launch id, verdict), or None.
    A launch is known by its replayer's report file (unique: schedule, pid and exec time in
    ns): a learner killed after storing its row and before forgetting the launch finds it here
    when it starts again, and does not judge it a second time."""
    key = event.get("stats")
    if not key:
        return None
    for row in launches.hook_launches_mentioning(conn, event["schedule_id"], json.dumps(key)):
        d = row["details"]
        if (d.get("hook_event") or {}).get("stats") == key:
            return row["id"], d.get("feedback") or {}
    return None


def _warm(stats: Optional[dict]) -> bool:
    """Over half the schedule was cached before the replay: the launch says nothing about it."""
    stats = stats or {}
    scheduled = stats.get("bytes_scheduled") or 0
    return bool(scheduled) and (stats.get("bytes_resident") or 0) > scheduled / 2


def _act(verdict: dict, history: List[dict], cfg) -> None:
    """What the verdicts so far do: `stale_after_bad` launches in a row not clearly faster than
    cold take the app off the prefetch path (auto: re-learned; off: "stopped", not prefetched
    until re-recorded); as many bad verdicts of any kind re-learn it (auto) or show it degraded
    and keep it (off)."""
    both = history + [verdict]
    verdict["bad_streak"], verdict["slow_streak"] = bad_streak(both), slow_streak(both)
    if verdict["slow_streak"] >= cfg.stale_after_bad:
        verdict["action"] = "relearn" if cfg.learn == "auto" else "stopped"
    elif verdict["bad_streak"] >= cfg.stale_after_bad:
        verdict["action"] = "relearn" if cfg.learn == "auto" else "degraded"


def overlapping(conn, event: dict, launch_s: float, running: Sequence[float] = ()) -> int:
    """How many other hooked launches ran during this one (exec to exit): those stored (this one
    is not yet), and those the learner has read and not judged yet (`running`: their exec times;
    exit not known yet). Execs the daemon read together carry the same time: they overlap."""
    start, end = event["t_exec"], event["t_exec"] + launch_s
    n = sum(1 for t in running if t < end)
    for t0, t1 in launches.recent_hook_intervals(conn):
        if t0 < end and t1 > start:
            n += 1
    return n


def judge(conn, event: dict, stats: Optional[dict], cfg, running: Sequence[float] = ()) -> Tuple[int, dict]:
    """Store the launches row of one hooked launch; returns (launch id, verdict). Run it in a
    transaction: the row and the stale mark of a verdict that acts go together. running: the
    exec times of the other hooked launches read and not judged yet (see overlapping)."""
    sid = event["schedule_id"]
    app_id = app_of_schedule(conn, sid)
    x, not_judged = measure(stats)
    launch_s, not_timed = exact_time(event, stats)
    history = judged_history(conn, app_id, sid)
    verdict = {"judged": x is not None, "not_judged": not_judged, "threshold": cfg.accuracy_threshold,
               "bad": False, "reason": None, "slow": None, "action": None, "not_timed": not_timed,
               "app_wait": app_wait(stats)}
    if x is not None:
        verdict.update(_verdict(x, cfg.accuracy_threshold,
                                [v["missed_bytes"] for v in history if v.get("missed_bytes") is not None]))
    others = overlapping(conn, event, launch_s, running) if launch_s is not None else 0
    cold = None
    if others:
        # launched together with others, it shares the disk: no cold launch alone compares with it
        verdict.update(slow=None, time_reason=f"{others} other hooked launch(es) ran at the same time: "
                                               f"not compared with a cold launch alone")
    elif launch_s is not None and not _warm(stats) and cache_lost(stats, stats["exit"], raw_unseen=True):
        # the prefetched pages were lost during the launch (a cache drop, a memory hog): its
        # time says nothing about the schedule
        verdict.update(slow=None, time_reason="prefetched pages lost during the launch: not compared with cold")
    elif launch_s is not None and not _warm(stats):
        verdict["comparable"] = True   # timed, alone, cold, its pages kept: hook/trial.py compares these
        cold = cold_reference(conn, app_id)
        stored = schedule_t_exp(conn, sid)
        expected = expected_time(stored, stats)
        note = "" if expected is None or abs(expected - stored[0]) < 1e-3 else \
            f" with the metadata step before the first segment as this launch measured it " \
            f"({stats.get('t_meta_prebuffer_ns', stats.get('t_meta_ns', 0)) / 1e9:.3f} s)"
        w = verdict["app_wait"]
        verdict.update(time_verdict(launch_s, cold, expected, note, w and w["cpu_s"]), cold=cold)
        if verdict["slow"] or verdict["over_t_exp"]:
            verdict["reason"] = "; ".join(r for r in (verdict["time_reason"], verdict["reason"]) if r)
            verdict["bad"] = True
    # accurate: judged, its hit ratio good, and faster than cold (a slow launch is never "accurate")
    verdict["accurate"] = verdict["judged"] and not verdict["bad"]
    if _has_verdict(verdict):
        _act(verdict, history, cfg)
    if verdict.get("comparable") and cfg.try_whole and not verdict["action"]:
        # segmented or whole: the margin is the noise of the app's cold launches where it has some
        w = verdict["app_wait"]
        waited = None if w is None or w["runq_s"] is None else w["waited_s"] + w["runq_s"]
        verdict["trial"] = trial.step(conn, sid, launch_s, cold["margin_s"] if cold else MIN_MARGIN * launch_s,
                                      waited)
    stats = stats or {}
    # used and prefetched-and-used bytes stay empty: the exit check sees residency, not use
    # (docs/hook.md); the coverage is in the verdict (scheduled_resident_bytes, hit_ratio)
    lid = launches.insert_launch(
        conn, mode="hook", launch_time_s=launch_s, app_id=app_id, schedule_id=sid,
        mechanism=stats.get("engine"), prefetched_bytes=stats.get("bytes_fetched"),
        details={"hook_event": event, "replay": stats, "feedback": verdict,
                 **({"not_timed": not_timed} if launch_s is None else {})})
    if verdict["action"] in ("relearn", "stopped"):
        # leaves the index at the next refresh; learn=auto re-records it, learn=off waits for a
        # `warmstart record` + `analyze` by hand
        why = ("not clearly faster than cold" if verdict["action"] == "stopped" or
               verdict["slow_streak"] >= cfg.stale_after_bad else "bad verdicts")
        for stale in trial_schedules(conn, sid):    # the trial's other schedule may be the active one
            mark_stale(conn, stale, reason=f"{max(verdict['bad_streak'], verdict['slow_streak'])} hooked "
                                           f"launches in a row {why} (feedback): {verdict['reason']}")
    return lid, verdict


def degraded(conn, cfg) -> Dict[str, str]:
    """Apps whose latest `stale_after_bad` verdicts (on the schedule of their latest hooked
    launch) were all bad: app -> reason and what was done. What `hook status` and `report` show."""
    out = {}
    for app_id, name in launches.apps_with_hook_launches(conn):
        sid = launches.latest_hook_schedule(conn, app_id)
        history = judged_history(conn, app_id, sid)
        slow, streak = slow_streak(history), bad_streak(history)
        if slow >= cfg.stale_after_bad:
            what = ("re-learned on its next launch (learn = \"auto\")" if cfg.learn == "auto" else
                    "no longer prefetched (learn = \"off\"): it left the hook index; re-record it with "
                    "`warmstart record` and `warmstart analyze`, or set learn = \"auto\"")
            last = next(v for v in reversed(history) if v.get("slow"))
            out[name] = f"{slow} launches in a row not clearly faster than cold, the last: {last['reason']}; {what}"
        elif streak >= cfg.stale_after_bad:
            what = ("re-learned on its next launch (learn = \"auto\")" if cfg.learn == "auto" else
                    "still prefetched (learn = \"off\"): re-record it with `warmstart record`, or set "
                    "learn = \"auto\" in the hook's config")
            out[name] = f"{streak} bad verdicts in a row, the last: {history[-1]['reason']}; {what}"
    return out


def hooked_apps(conn) -> List[dict]:
    """Per app with hooked launches: how many, how many have an exact time, their median, the
    cold reference, why the latest untimed one has none, how long the app waited on the disk
    after its release (median) and where, and for a CPU (median over the launches whose
    replayer counted it), and its latest segmented-or-whole step (trial.py).
    What `hook status` shows."""
    out = []
    for app_id, name in launches.apps_with_hook_launches(conn):
        rows = launches.list_launches(conn, app_id=app_id, mode="hook")
        times = [r["launch_time_s"] for r in rows if r["launch_time_s"] is not None]
        untimed = [r for r in rows if r["launch_time_s"] is None]
        cold = cold_reference(conn, app_id)
        waits = [w for w in ((r["details"].get("feedback") or {}).get("app_wait") for r in rows) if w]
        places = [w["mostly_in"] for w in waits if w["mostly_in"]]
        runq = [w["runq_s"] for w in waits if w.get("runq_s") is not None]
        trials = [t for t in ((r["details"].get("feedback") or {}).get("trial") for r in rows) if t]
        out.append({"app": name, "launches": len(rows), "timed": len(times), "not_timed": len(untimed),
                    "median_s": statistics.median(times) if times else None,
                    "cold_s": cold["median_s"] if cold else None,
                    "waited_median_s": statistics.median(w["waited_s"] for w in waits) if waits else None,
                    "waited_mostly_in": max(set(places), key=places.count) if places else None,
                    "runq_median_s": statistics.median(runq) if runq else None,
                    "trial": trials[-1] if trials else None,
                    "not_timed_reason": (untimed[-1]["details"].get("not_timed") or "no exact time")
                    if untimed else None})
    return out
