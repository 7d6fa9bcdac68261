"""`warmstart bench --unknown`: issue 7's targets, apps launched as if never seen.

No recording, no schedule, no analysis: every bench app is launched through
warmstart.speculate.run_fallback_launch with each mechanism (none = the cold baseline, measured
the same way, tracer included), caches dropped before each launch, `reps` repetitions
round-robin over apps and mechanisms. Each launch is checked against a plain reference run
(exit status and output) and stored in `launches` under the bench_id as mode `unknown-<mech>`
(unknown-cold for none), with accuracy and waste (FallbackResult) in the byte columns and the
per-mechanism pages, the copy's and the online prefetcher's facts in details.

Targets (issue 7): for one mechanism chosen once for all apps (the one with the lowest median
ratio over apps among those that slow no app by more than 3 %; else the lowest median), median
over apps of launch/cold ≤ 0.85 and no app's ratio above 1.03.
"""

from typing import Callable, Dict, List

from ..db import launches as launches_db
from ..db.recordings import upsert_app
from ..report import stats

MECHS = ("none", "spec", "online", "both")
TARGET_MEDIAN = 0.85
TARGET_WORST = 1.03


def mode_of(mech: str) -> str:
    return "unknown-cold" if mech == "none" else f"unknown-{mech}"


def run_unknown(conn, cfg, dut, doc: dict, bench_id: str, apps, until, make_cold,
                tick: Callable[[str], None], say: Callable[[str], None]) -> dict:
    """Measure every app cold and with each fallback mechanism; returns doc["unknown"]."""
    from ..speculate.fallback import run_fallback_launch
    prepared = []
    for app in apps:
        name = f"{app.name}-{cfg.label}"
        argv = dut.argv(app)
        make_cold(dut)
        ref = run_fallback_launch(argv, "none", until, cfg.timeout, trace=False)
        if ref.end_reason == "timeout":
            doc["problems"].append(f"{app.name}: the plain reference run did not finish in {cfg.timeout:.0f} s")
            continue
        app_id = upsert_app(conn, name, argv[0].encode() if isinstance(argv[0], str) else argv[0], argv)
        doc["apps"][app.name] = {"name": name, "argv": app.argv, "recorded": "never",
                                 "reference": {"exit_status": ref.exit_status, "output_bytes": len(ref.output)}}
        prepared.append((app, name, argv, ref, app_id))
        tick(f"reference {app.name}")
    say("measuring never-seen launches: " + ", ".join(mode_of(m) for m in MECHS))
    for rep in range(cfg.reps):
        for app, name, argv, ref, app_id in prepared:
            for mech in MECHS:
                make_cold(dut)
                r = run_fallback_launch(argv, mech, until, cfg.timeout)
                where = f"{app.name} {mode_of(mech)} rep {rep + 1}"
                if r.exit_status != ref.exit_status:
                    doc["problems"].append(f"{where}: exit status {r.exit_status}, plain run {ref.exit_status}")
                elif r.output != ref.output:
                    doc["problems"].append(f"{where}: output differs from the plain run's")
                details = {k: v for k, v in r.as_dict().items() if k not in ("launch_time_s", "exit_status")}
                details["rep"] = rep
                launches_db.insert_launch(
                    conn, app_id=app_id, mode=mode_of(mech), mechanism=mech, disk=cfg.label,
                    launch_time_s=r.launch_time_s, exit_status=r.exit_status, bench_id=bench_id,
                    prefetched_bytes=r.prefetched_pages * 4096, used_bytes=r.used_pages * 4096,
                    prefetched_used_bytes=r.prefetched_used_pages * 4096, details=details)
                tick(f"rep {rep + 1} {app.name} {mode_of(mech)}")
    return {"mechanisms": list(MECHS), "modes": [mode_of(m) for m in MECHS]}


def results(conn, bench_id: str) -> dict:
    """Per app and mechanism: time spread, ratio to cold, accuracy, waste (medians over reps,
    also per mechanism of the union); then the targets."""
    by: Dict[str, Dict[str, List]] = {}
    for name, mode, t, status, details in launches_db.bench_launches_with_mode_prefix(conn, bench_id, "unknown-"):
        base = name.rsplit("-", 1)[0]
        by.setdefault(base, {}).setdefault(mode, []).append((t, status, details))
    per_app = {}
    for base, modes in sorted(by.items()):
        a = {"times": {}, "ratio": {}, "accuracy": {}, "waste": {}, "by_mechanism": {}, "failed_launches": 0,
             "copy_killed": {}}
        for mode, launches in modes.items():
            ok = [x for x in launches if x[1] in (0, None)]
            a["failed_launches"] += len(launches) - len(ok)
            s = stats.spread(x[0] for x in ok)
            if s:
                a["times"][mode] = s.as_dict()
            a["accuracy"][mode] = stats.median(x[2].get("accuracy") for x in ok)
            a["waste"][mode] = stats.median(x[2].get("waste") for x in ok)
            parts = {}
            for _, _, d in ok:
                for src, v in (d.get("by_mechanism") or {}).items():
                    parts.setdefault(src, []).append(v)
            a["by_mechanism"][mode] = {src: {
                "prefetched_pages": stats.median(v["prefetched_pages"] for v in vs),
                "prefetched_used_pages": stats.median(v["prefetched_used_pages"] for v in vs)} for src, vs in parts.items()}
            kills = [(d.get("copy") or {}).get("killed_reason") for _, _, d in ok if d.get("copy")]
            if kills:
                a["copy_killed"][mode] = {k or "exited": kills.count(k) for k in set(kills)}
        cold = (a["times"].get("unknown-cold") or {}).get("median")
        for mech in MECHS[1:]:
            a["ratio"][mode_of(mech)] = stats.ratio((a["times"].get(mode_of(mech)) or {}).get("median"), cold)
        per_app[base] = a
    return {"apps": per_app, **targets(per_app)}


def targets(per_app: dict) -> dict:
    """Each mechanism's median and worst ratio over apps; the one chosen; issue 7's bars."""
    per_mech = {}
    for mech in MECHS[1:]:
        r = [a["ratio"].get(mode_of(mech)) for a in per_app.values()]
        r = [x for x in r if x is not None]
        per_mech[mech] = {"median_ratio": stats.median(r), "worst_ratio": max(r) if r else None, "apps": len(r)}
    measured = [m for m in per_mech if per_mech[m]["median_ratio"] is not None]
    safe = [m for m in measured if per_mech[m]["worst_ratio"] <= TARGET_WORST]
    chosen = min(safe or measured, key=lambda m: per_mech[m]["median_ratio"], default=None)
    c = per_mech.get(chosen, {})
    rows = [(f"unknown-app launch ≤ {TARGET_MEDIAN} × cold (median over apps, mechanism {chosen})",
             c.get("median_ratio"), TARGET_MEDIAN),
            (f"no app slower than {TARGET_WORST} × cold (largest ratio, mechanism {chosen})",
             c.get("worst_ratio"), TARGET_WORST)]
    why = ("lowest median ratio among those slowing no app by more than 3 %" if safe else
           "every mechanism slows some app by more than 3 %: lowest median ratio")
    return {"per_mechanism": per_mech, "chosen": chosen, "chosen_because": why if chosen else None,
            "targets": [{"criterion": crit, "measured": v, "bar": bar, "met": None if v is None else v <= bar}
                        for crit, v, bar in rows]}
