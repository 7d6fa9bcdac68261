"""`warmstart bench --relocate`: issue 9's targets measured in the same bench run, side by side.

After the matrix (the "before" launches) every bench app is relocated in ONE relocate_apps call
on the bench's own emulated disk (a fresh copy of the system image per run: a cached image is
never touched), relocate_apps remaps and re-analyzes the schedules, and reorder and segmented are
measured again, `reps` times round-robin. Those launches are stored under the same bench_id as
modes "reorder-relocated" and "segmented-relocated". With relocate_one=NAME, NAME alone is
relocated first and every other app's segmented launch is measured ("segmented-one-relocated"):
does relocating one app slow the others down?

Seeks: on an emulated HDD the disk model counts the requests that moved the head. Every bench
launch but warm (whose unmeasured warm-up run would be counted too) is counted from a reset just
before it (after a sync) to its end, and stored in the launch's details.disk_stats: the seeks of
the prefetch plus those of the app's own reads the prefetch missed.
"""

import os
import time
from typing import Callable, Optional

from ..db import launches as launches_db
from ..db.schedules import active_schedule_summary
from ..errors import WarmstartError
from ..report import stats, summary

AFTER_MODES = ("reorder", "segmented")
ONE_MODE = "segmented"
SLOWDOWN_BAR = 1.05      # issue 9: no app's prefetched launch slower by more than 5 %


def counted(conn, dut, bench_id: str, mode: str, run: Callable[[], None], label: Optional[str] = None,
            problems: Optional[list] = None) -> None:
    """Run one bench launch (run() stores it), then add the emulated disk's request and seek
    counts over it to its details, and store it as mode `label` if given. Problems run() added
    are prefixed with the label, so a failure after relocation is not mistaken for one before."""
    counting = dut.emu is not None and mode != "warm"
    if counting:
        os.sync()               # write-back of earlier launches must not count as this launch's
        dut.emu.reset_stats()
    last = launches_db.last_bench_launch_id(conn, bench_id)
    n_problems = len(problems) if problems is not None else 0
    run()
    if problems is not None and label:
        problems[n_problems:] = [f"[{label}] {p}" for p in problems[n_problems:]]
    new = launches_db.last_bench_launch_id(conn, bench_id)
    if new == last:
        return  # nothing stored (the problem is in doc["problems"])
    disk = dut.emu.stats() if counting else None
    launches_db.set_launch_disk_stats(conn, new, disk, mode=label)


def check_config(cfg) -> None:
    """Fail before anything runs: relocation moves files, so only on the bench's own image."""
    if not (cfg.relocate or cfg.relocate_one):
        return
    if cfg.disk == "real":
        raise WarmstartError("--relocate moves files: it runs only on an emulated disk (a fresh copy of the "
                             "system image per bench run), never on --disk real")
    missing = [m for m in ("reorder", "segmented") if m not in cfg.modes]
    if missing:
        raise WarmstartError(f"--relocate compares with the {' and '.join(missing)} launches before relocation: "
                             f"add {','.join(missing)} to --modes")
    if cfg.relocate_one and cfg.relocate_one not in [a.name for a in cfg.apps]:
        raise WarmstartError(f"--relocate-one {cfg.relocate_one}: not one of the bench apps "
                             f"({', '.join(a.name for a in cfg.apps)})")


def run_relocation(conn, db_path, cfg, dut, doc: dict, bench_id: str, prepared: dict, until, measure,
                   tick: Callable[[str], None], say: Callable[[str], None]) -> dict:
    """Relocate (one app, optionally, then all) and measure again; returns doc["relocation"].

    prepared: bench's {app: (app, name, argv, ref, info)}; measure: bench's _measure."""
    from ..relocate import relocate_apps
    out = {"after_modes": list(AFTER_MODES), "steps": []}
    steps = ([("one", [cfg.relocate_one], (ONE_MODE,))] if cfg.relocate_one else []) + \
            ([("all", list(prepared), AFTER_MODES)] if cfg.relocate else [])
    for step, apps, modes in steps:
        names = [prepared[a][1] for a in apps]
        say(f"relocating {', '.join(names)} on the emulated disk")
        t0 = time.monotonic()
        try:
            rep = relocate_apps(conn, names, progress=say)
        except WarmstartError as e:
            doc["problems"].append(f"relocation of {', '.join(names)} failed: {e}")
            out["steps"].append({"step": step, "apps": names, "error": str(e)})
            break
        entry = {"step": step, "apps": names, "seconds": time.monotonic() - t0, **_report_facts(rep)}
        entry["schedules"] = {a: _active(conn, prepared[a][1]) for a in prepared}
        out["steps"].append(entry)
        label_of = {m: f"{m}-{'one-' if step == 'one' else ''}relocated" for m in modes}
        measured = [a for a in prepared if step == "all" or a not in apps]
        for r in range(cfg.reps):
            for a in measured:
                app, name, argv, ref, info = prepared[a]
                sid = entry["schedules"][a]["id"]
                after = dict(info, schedules={"ours": sid, "paper": sid, "plain": sid})
                for m in modes:
                    counted(conn, dut, bench_id, m, lambda: measure(
                        conn, db_path, cfg, dut, doc, bench_id, r, app, name, argv, ref, after, m, until),
                        label=label_of[m], problems=doc["problems"])
                    tick(f"{step}-relocated rep {r + 1} {a} {m}")
    return out


def _report_facts(rep) -> dict:
    """What the relocation did, from relocate_apps' Report (the pieces list stays out: long)."""
    return {"moved_files": rep.moved_files, "moved_bytes": rep.moved_bytes, "region_bytes": rep.region_bytes,
            "region": rep.region, "refused": len(rep.refused), "refused_examples": rep.refused[:5],
            "warnings": rep.warnings, "extents_before": rep.extents_before, "extents_after": rep.extents_after,
            "model_before": rep.model_before, "model_after": rep.model_after, "reanalysis": rep.reanalysis,
            "relocation_id": rep.relocation_id, "interrupted": rep.interrupted}


def _active(conn, name: str) -> dict:
    active = active_schedule_summary(conn, name)
    if active is None:
        raise WarmstartError(f"{name} has no active schedule after relocation: see `warmstart show {name}`")
    return active


# ---- results ---------------------------------------------------------------------------------

def results(conn, bench_id: str, doc: dict) -> dict:
    """Per app and over apps: issue 9's ratios, seeks before/after, and the targets."""
    rows = summary.load_launches(conn, bench_id=bench_id)
    by = {}
    for r in rows:
        if r["exit_status"] not in (0, None) or summary.unprefetched(r):
            continue
        base = r["app"].rsplit("-", 1)[0]
        by.setdefault(base, {}).setdefault(r["method"], []).append(r)
    per_app = {}
    for base, methods in sorted(by.items()):
        t = {m: stats.spread(r["launch_time_s"] for r in rs) for m, rs in methods.items()}
        med = {m: s.median for m, s in t.items() if s}
        seeks = {m: stats.median([(r["details"].get("disk_stats") or {}).get("seeks") for r in rs])
                 for m, rs in methods.items()}
        ranges = {m: stats.median([(r["details"].get("replay") or {}).get("ranges_fetched") for r in rs])
                  for m, rs in methods.items()}
        keep = ("cold", "reorder", "segmented", "reorder-relocated", "segmented-relocated",
                "segmented-one-relocated")
        per_app[base] = {
            "times": {m: t[m].as_dict() for m in keep if t.get(m)},
            "seeks": {m: seeks[m] for m in keep if seeks.get(m) is not None},
            "ranges_fetched": {m: ranges[m] for m in keep if ranges.get(m) is not None},
            "seg_after_vs_reorder_before": stats.ratio(med.get("segmented-relocated"), med.get("reorder")),
            "seg_after_vs_seg_before": stats.ratio(med.get("segmented-relocated"), med.get("segmented")),
            "seg_one_vs_seg_before": stats.ratio(med.get("segmented-one-relocated"), med.get("segmented")),
            "seek_drop_segmented": _drop(seeks.get("segmented"), seeks.get("segmented-relocated")),
            "seek_drop_reorder": _drop(seeks.get("reorder"), seeks.get("reorder-relocated")),
        }
    return {"apps": per_app, "targets": targets(per_app)}


def _drop(before: Optional[float], after: Optional[float]) -> Optional[float]:
    """before / after; an after of 0 seeks counts as 1, so the factor stays finite (a lower bound)."""
    if before is None or after is None:
        return None
    return before / max(after, 1)


def targets(per_app: dict) -> list:
    """Issue 9's "done when" bars: (criterion, measured, bar, met?)."""
    col = lambda k: [a[k] for a in per_app.values() if a[k] is not None]  # noqa: E731
    rows = [
        ("segmented after ≤ 0.5 × reorder before (median over apps)", stats.median(col("seg_after_vs_reorder_before")),
         0.5, lambda v: v <= 0.5),
        ("seeks of a segmented launch drop ≥ 5× (median over apps)", stats.median(col("seek_drop_segmented")),
         5.0, lambda v: v >= 5.0),
        ("seeks drop ≥ 5× for every app (smallest drop)", min(col("seek_drop_segmented"), default=None),
         5.0, lambda v: v >= 5.0),
        ("relocating all: no app's segmented launch slower by > 5 % (largest after/before)",
         max(col("seg_after_vs_seg_before"), default=None), SLOWDOWN_BAR, lambda v: v <= SLOWDOWN_BAR),
        ("relocating one: no other app's segmented launch slower by > 5 % (largest after/before)",
         max(col("seg_one_vs_seg_before"), default=None), SLOWDOWN_BAR, lambda v: v <= SLOWDOWN_BAR),
    ]
    return [{"criterion": c, "measured": v, "bar": bar, "met": None if v is None else ok(v)}
            for c, v, bar, ok in rows]
