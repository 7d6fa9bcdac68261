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

Only `stale_after_bad` consecutive bad verdicts act: with learn = "auto" the schedule is marked
stale and the app re-learned on its next launch; with learn = "off" it keeps being prefetched
and is shown as degraded, with the reason, in `hook status` and `report`.
Limits: reads of files outside the schedule are not seen; a prefetched page the app never
touched cannot be told from a used one, so this is coverage of the launch's reads.
"""

import json
from typing import Dict, List, Optional, Tuple

from ..db import launches
from ..db.schedules import app_of_schedule, mark_stale

MIB = 1 << 20


def measure(stats: Optional[dict]) -> Tuple[Optional[dict], Optional[str]]:
    """(the exit measurement, None) or (None, why this launch cannot be judged)."""
    stats = stats or {}
    x = stats.get("exit")
    if not stats:
        return None, "the replayer left no report (it was refused or killed)"
    if not x or not x.get("asked"):
        return None, "no measurement at the exit (replayer without --judge-at-exit)"
    scheduled = stats.get("bytes_scheduled") or 0
    resident_before = stats.get("bytes_resident") or 0
    made_resident = (stats.get("bytes_fetched") or 0) + resident_before
    inside = x.get("scheduled_resident_bytes") or 0
    if scheduled and resident_before > scheduled / 2:
        return None, "over half the schedule was cached before the replay (a warm launch)"
    evicted_pages = x.get("recently_evicted_pages") or 0
    if evicted_pages * 4096 > max(MIB, scheduled // 100):
        return None, f"{evicted_pages} pages of the schedule were evicted during the launch (memory pressure)"
    if made_resident and inside < made_resident / 2:
        return None, (f"only {inside // MIB} of the {made_resident // MIB} MiB the replay made resident "
                      f"were still cached at the exit (the cache was dropped or evicted)")
    return x, None


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


def judged_history(conn, app_id: int) -> List[dict]:
    """The feedback of this app's judged hooked launches, oldest first."""
    return [l["details"]["feedback"] for l in launches.list_launches(conn, app_id=app_id, mode="hook")
            if (l["details"].get("feedback") or {}).get("judged")]


def bad_streak(history: List[dict]) -> int:
    """How many of the latest judged verdicts in a row were bad."""
    n = 0
    for v in reversed(history):
        if not v.get("bad"):
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


def judge(conn, event: dict, stats: Optional[dict], cfg) -> Tuple[int, dict]:
    """Store the launches row of one hooked launch; returns (launch id, verdict). Run it in a
    transaction: the row and the stale mark of a verdict that acts go together."""
    sid = event["schedule_id"]
    app_id = app_of_schedule(conn, sid)
    x, not_judged = measure(stats)
    history = judged_history(conn, app_id)
    verdict = {"judged": x is not None, "not_judged": not_judged, "threshold": cfg.accuracy_threshold,
               "bad": False, "action": None}
    if x is not None:
        verdict.update(_verdict(x, cfg.accuracy_threshold,
                                [v["missed_bytes"] for v in history if v.get("missed_bytes") is not None]))
        streak = bad_streak(history + [verdict])
        verdict["bad_streak"] = streak
        if streak >= cfg.stale_after_bad:
            verdict["action"] = "relearn" if cfg.learn == "auto" else "degraded"
    stats = stats or {}
    x = stats.get("exit") or {}
    # the exact launch time: exec (the daemon's clock) to the exit, both CLOCK_MONOTONIC
    launch_s = (x["t_measured"] - event["t_exec"]) if x.get("exited") and event.get("t_exec") else -1.0
    lid = launches.insert_launch(
        conn, mode="hook", launch_time_s=launch_s, app_id=app_id, schedule_id=sid,
        mechanism=stats.get("engine"), prefetched_bytes=stats.get("bytes_fetched"),
        used_bytes=(verdict.get("scheduled_resident_bytes") or 0) + (verdict.get("missed_bytes") or 0)
        if verdict["judged"] else None,
        prefetched_used_bytes=verdict.get("scheduled_resident_bytes") if verdict["judged"] else None,
        details={"hook_event": event, "replay": stats, "feedback": verdict})
    if verdict["action"] == "relearn":
        # leaves the index at the next refresh; learn=auto re-records it
        mark_stale(conn, sid, reason=f"{verdict['bad_streak']} bad verdicts in a row (feedback)")
    return lid, verdict


def degraded(conn, cfg) -> Dict[str, str]:
    """Apps whose latest `stale_after_bad` judged hooked launches were all bad: app -> reason.
    What `hook status` and `report` show; with learn = "off" these apps are still prefetched."""
    out = {}
    for app_id, name in launches.apps_with_hook_launches(conn):
        history = judged_history(conn, app_id)
        streak = bad_streak(history)
        if streak >= cfg.stale_after_bad:
            what = ("re-learned on its next launch (learn = \"auto\")" if cfg.learn == "auto" else
                    "still prefetched (learn = \"off\"): re-record it with `warmstart record`, or set "
                    "learn = \"auto\" in the hook's config")
            out[name] = f"{streak} bad verdicts in a row, the last: {history[-1]['reason']}; {what}"
    return out
