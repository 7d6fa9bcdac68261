"""docs/benchmarks.md, generated from one bench run's JSON document (never hand-written numbers)."""

import time
from pathlib import Path

from ..errors import WarmstartError
from ..hook.trial import describe
from . import stats

COLUMNS = ("cold", "cold-traced", "interleave", "reorder", "reorder-ours", "segmented-paper", "segmented", "hook",
           "run-cli", "warm")


def _s(v):
    return "–" if v is None else f"{v:.3f}"


def _x(v):
    return "–" if v is None else f"{v:.2f}×"


def _steal(v):
    return "" if v is None else f"; {v * 1e3:.0f} ms"


def _modelled(app: dict) -> bool:
    """Was one of the app's sorted passes estimated from the profile (node refused O_DIRECT)?"""
    return any((app.get(k) or {}).get("modelled") for k in ("raw_pass", "schedule_pass", "sorted_pass"))


def targets(doc: dict) -> list:
    """The issue's "done when" bars for this disk, each (criterion, measured, pass?)."""
    r = list(doc["results"].values())
    med = lambda key: stats.median(a.get(key) for a in r)  # noqa: E731
    checks = []
    kind = doc.get("disk_kind", doc["disk"])
    if kind == "hdd7200":
        checks = [("segmented ≤ 0.95 × reorder (median over apps)", med("segmented_vs_reorder"), 0.95),
                  ("segmented ≤ 1.00 × reorder for every app",
                   max([a["segmented_vs_reorder"] for a in r if a["segmented_vs_reorder"]] or [None]) if r else None, 1.0),
                  ("segmented ≤ 1.10 × LB (median)", med("segmented_vs_bound"), 1.10),
                  ("segmented ≤ 0.25 × cold (median)", med("segmented_vs_cold"), 0.25),
                  ("recorder tracing ≤ 1.05 × cold (median)", med("tracing_overhead"), 1.05)]
    elif kind == "ssd":
        checks = [("segmented ≤ 0.65 × cold (median)", med("segmented_vs_cold"), 0.65),
                  ("segmented ≤ 0.95 × best of reorder, interleave (median)", med("segmented_vs_best_baseline"), 0.95)]
    over = [v for a in r for m, v in (a.get("overlay_vs_lower") or {}).items()
            if m in ("segmented", "hook") and v is not None]
    if over:
        checks.append(("APP@overlay ≤ 1.10 × the same launch from the lower file system "
                       "(segmented and hook, every app)", max(over), 1.10))
    if any(a.get("hook_vs_best_reorder") is not None for a in r):
        checks += [("hook ≤ 0.95 × the better of reorder, reorder-ours (median over apps)",
                    med("hook_vs_best_reorder"), 0.95),
                   ("hook ≤ 1.00 × the better of reorder, reorder-ours for every app",
                    max(a["hook_vs_best_reorder"] for a in r if a.get("hook_vs_best_reorder")), 1.0)]
    worst = [a["hook_worst_vs_cold"] for a in r if a.get("hook_worst_vs_cold") is not None]
    if worst:   # issue 22: never slower than no prefetch
        at_cpu = [a["hook_worst_vs_cold_at_cpu"] for a in r if a.get("hook_worst_vs_cold_at_cpu") is not None]
        checks += [("every hooked launch ≤ 1.02 × its app's cold median (the highest, every app)", max(worst), 1.02),
                   ("the same at its CPU: cold's median time off the CPU + the launch's own CPU time (the highest)",
                    max(at_cpu, default=None), 1.02),
                   ("apps still prefetched at the end after 3 or more hooked launches in a row slower than their "
                    "cold median", len(left_in_path(doc)), 0)]
    out = [(name, v, None if v is None else v <= bar) for name, v, bar in checks]
    lowest = [a["prefetched_min_vs_bound_at_cpu"] for a in r if a.get("prefetched_min_vs_bound_at_cpu")]
    if lowest:   # the bound's own check (docs/algorithms.md): a launch below it would refute it
        out.append(("every prefetched launch ≥ 0.99 × its LB at its CPU (the lowest, every app)",
                    min(lowest), min(lowest) >= 0.99))
    out.append(("every launch correct (exit status and output as a plain run)", len(doc["problems"]),
                not doc["problems"]))
    return out


def left_in_path(doc: dict) -> list:
    """The apps whose last 3 or more hooked launches of the run were each slower than their cold
    median and that the hook still served at its end, neither shown degraded nor out of its index."""
    hook = doc.get("hook") or {}
    index, degraded = hook.get("index_apps"), hook.get("degraded") or {}
    return [a["app"] for a in doc["results"].values() if (a.get("hook_slow_at_end") or 0) >= 3
            and a["app"] not in degraded and (index is None or a["app"] in index)]


def _fs_line(doc: dict) -> str:
    """Which file system the apps ran from (older runs' documents name none: ext4)."""
    fs = doc.get("fs") or "ext4"
    line = f"- file system {fs}" + (f", {doc['layout']} layout" if doc.get("layout") else "")
    if doc.get("overlay"):
        line += (f"; APP@overlay runs from an overlayfs whose lower layer is that {fs} (upper and work "
                 "dirs on tmpfs), compared with the same launch from the lower file system")
    prof = doc.get("disk_profile")
    if prof:   # an emulated disk's (older runs' documents say nothing: measured in the run)
        line += ("; disk profile measured in this run" if not prof["cached"] else
                 "; disk profile measured " + time.strftime("%Y-%m-%d %H:%M", time.localtime(prof["measured_at"]))
                 + " on a disk of the same model (`--reprofile` measures it again)")
    return line


def render(doc: dict, command: str = "") -> str:
    if doc.get("unknown") and not doc["results"]:
        return render_unknown(doc, command)
    lines = [
        f"# Benchmarks on `{doc['disk']}`" + (" with relocation" if doc.get("relocation") else "")
        + (" and from an overlay over it" if doc.get("overlay") else ""),
        "",
        "Generated by `warmstart bench`; do not edit by hand. Reproduce with:",
        "",
        f"    {command or 'warmstart bench --disk ' + doc['disk']}",
        "",
        f"- bench run `{doc['bench_id']}`, disk `{doc['disk']}`, {doc['reps']} repetitions per mode, "
        f"kernel {doc['kernel']}, {time.strftime('%Y-%m-%d %H:%M', time.localtime(doc['started_at']))}",
        _fs_line(doc),
        f"- took {(doc.get('finished_at', doc['started_at']) - doc['started_at']) / 60:.1f} min; "
        "modes round-robin within each repetition; caches dropped before every mode but warm",
        "- interleave and reorder (the papers' baselines) fetch the launch's blocks as recorded; reorder-ours "
        "fetches our schedule (gap-merged, with each file's metadata) whole before the launch",
        "- LB, the lower bound (docs/algorithms.md): max(fastest warm; one LBA-sorted O_DIRECT pass of what our schedule "
        "reads; max over k of the sorted pass of the first k reads + the launch's busy CPU time after read k, "
        "at most the fastest warm launch); "
        "warm|raw = max(warm, one sorted pass over the recording's raw requests), what older runs called LB"
        + ("; the passes are ESTIMATED from the device profile where the device refused O_DIRECT ("
           + ", ".join(sorted(n for n, a in doc.get("apps", {}).items() if _modelled(a))) + ")"
           if any(_modelled(a) for a in doc.get("apps", {}).values()) else ""),
        "",
        "## Median launch time (s)",
        "",
        "| app | " + " | ".join(COLUMNS) + " | t_exp | LB | warm\\|raw |",
        "|---|" + "---:|" * (len(COLUMNS) + 3),
    ]
    for name, a in doc["results"].items():
        lines.append(f"| {name} | " + " | ".join(_s((a["methods"].get(c) or {}).get("median")) for c in COLUMNS)
                     + f" | {_s(a.get('t_exp_s'))} | {_s(a.get('bound_s'))} | {_s(a.get('warm_or_raw_pass_s'))} |")
    lines += ["", "## Relative to cold (median; min–max over the repetitions)", "",
              "| app | " + " | ".join(COLUMNS) + " |", "|---|" + "---:|" * len(COLUMNS)]
    for name, a in doc["results"].items():
        cells = []
        for c in COLUMNS:
            m, cold = a["methods"].get(c), a["methods"].get("cold")
            if not m or not cold:
                cells.append("–")
            else:
                cm = cold["median"]
                cells.append(f"{m['median'] / cm:.2f} ({m['min'] / cm:.2f}–{m['max'] / cm:.2f})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "## Comparisons", "",
              "| app | seg/reorder | seg/reorder-ours | seg-paper/reorder | seg/LB | seg/LB at its CPU | seg/cold "
              "| seg/best baseline | tracing overhead |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, a in doc["results"].items():
        lines.append(f"| {name} | {_x(a['segmented_vs_reorder'])} | {_x(a.get('segmented_vs_reorder_ours'))} | "
                     f"{_x(a['segmented_paper_vs_reorder'])} | "
                     f"{_x(a.get('segmented_vs_bound'))} | {_x(a.get('segmented_vs_bound_at_cpu'))} | "
                     f"{_x(a['segmented_vs_cold'])} | "
                     f"{_x(a['segmented_vs_best_baseline'])} | {_x(a['tracing_overhead'])} |")
    if any(a.get("hook_vs_cold") is not None or a.get("run_cli_overhead_s") is not None
           for a in doc["results"].values()):
        lines += ["", "## The launch a user gets: hooked plain launches, `warmstart run` from outside", "",
                  "hook: plain launches with warmstartd and its learner running, "
                  f"{(doc.get('hook') or {}).get('launches_per_app', '–')} per app, spread over the repetitions (each after the repetition's other modes), "
                  "caches dropped before each, fork to exit. run-cli: `warmstart run` timed from outside; "
                  "overhead = that minus the launch time it reports. LB at its CPU: each launch against "
                  "LB with its CPU halves scaled by that launch's CPU time over the fastest warm launch's "
                  "(docs/algorithms.md), median over the launches. worst hook / cold: the slowest hooked "
                  "launch over the cold median; at its CPU: over the cold launches' median time off the CPU "
                  "(launch time - the app's CPU time) plus that launch's own CPU time; host steal: the "
                  "CPU time the hypervisor took from this machine's CPUs during that launch (/proc/stat).", "",
                  "| app | hook / best of reorder, reorder-ours | hook / LB | hook / LB at its CPU | hook / cold "
                  "| worst hook / cold (at its CPU; host steal) | outcomes | run-cli overhead (s) |",
                  "|---|---:|---:|---:|---:|---:|---|---:|"]
        for name, a in doc["results"].items():
            oc = a.get("hook_outcomes") or []
            shown = ", ".join(f"{o} {oc.count(o)}" for o in sorted(set(oc))) or "–"
            lines.append(f"| {name} | {_x(a.get('hook_vs_best_reorder'))} | {_x(a.get('hook_vs_bound'))} | "
                         f"{_x(a.get('hook_vs_bound_at_cpu'))} | {_x(a.get('hook_vs_cold'))} | "
                         f"{_x(a.get('hook_worst_vs_cold'))} ({_x(a.get('hook_worst_vs_cold_at_cpu'))}"
                         f"{_steal(a.get('hook_worst_steal_s'))}) | "
                         f"{shown} | {_s(a.get('run_cli_overhead_s'))} |")
        if (doc.get("hook") or {}).get("degraded"):
            lines += [f"- degraded: {k}: {v}" for k, v in doc["hook"]["degraded"].items()]
        for k, t in ((doc.get("hook") or {}).get("trials") or {}).items():
            lines.append(f"- segmented or whole (docs/hook.md): {k}: {describe(t)}")
    lines += ["", "## Targets (issue 5)", "", "| criterion | measured | met |", "|---|---:|---|"]
    for crit, v, ok in targets(doc):
        shown = v if isinstance(v, int) else _x(v)
        lines.append(f"| {crit} | {shown} | {'–' if ok is None else ('yes' if ok else '**no**')} |")
    if doc.get("relocation"):
        lines += relocation_section(doc["relocation"])
    if doc["problems"]:
        lines += ["", "## Problems", ""] + [f"- {p}" for p in doc["problems"]]
    return "\n".join(lines) + "\n"


def _spread(t):
    """median (min–max) of a launch-time spread dict, or –."""
    return "–" if not t else f"{t['median']:.3f} ({t['min']:.3f}–{t['max']:.3f})"


def _n(v):
    return "–" if v is None else f"{v:.0f}"


def relocation_section(rel: dict) -> list:
    """The "relocation" table: issue 9's targets, measured in the same bench run (bench/relocation.py)."""
    lines = ["", "## Relocation (issue 9)", "",
             "Same bench run: the matrix above is \"before\"; then the apps were relocated on the emulated "
             "disk and measured again. Times in s, median (min–max); seeks = disk-model requests that "
             "moved the head during the whole launch (prefetch and the app's own misses), median.", ""]
    for st in rel.get("steps", []):
        if "error" in st:
            lines.append(f"- relocating {', '.join(st['apps'])}: **failed**: {st['error']}")
            continue
        segs = ", ".join(f"{a} {s['segments']}" for a, s in sorted(st["schedules"].items()))
        lines.append(f"- relocated {', '.join(st['apps'])} in one call ({st['seconds']:.0f} s): "
                     f"{st['moved_files']} files, {st['moved_bytes'] / 2**20:.1f} MiB moved, {st['refused']} refused, "
                     f"extents {st['extents_before']} → {st['extents_after']}; segments after: {segs}")
    res = rel.get("results") or {"apps": {}, "targets": []}
    lines += ["", "| app | reorder before | segmented before | segmented after | seg after / reorder before "
              "| seeks seg before → after | seek drop | seg after / seg before | seg, one other relocated / before |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, a in res["apps"].items():
        t, sk = a["times"], a["seeks"]
        lines.append(f"| {name} | {_spread(t.get('reorder'))} | {_spread(t.get('segmented'))} | "
                     f"{_spread(t.get('segmented-relocated'))} | {_x(a['seg_after_vs_reorder_before'])} | "
                     f"{_n(sk.get('segmented'))} → {_n(sk.get('segmented-relocated'))} | "
                     f"{_x(a['seek_drop_segmented'])} | {_x(a['seg_after_vs_seg_before'])} | "
                     f"{_x(a['seg_one_vs_seg_before'])} |")
    lines += ["", "| criterion | measured | met |", "|---|---:|---|"]
    for t in res["targets"]:
        lines.append(f"| {t['criterion']} | {_x(t['measured'])} | "
                     f"{'–' if t['met'] is None else ('yes' if t['met'] else '**no**')} |")
    return lines


def _pct(v):
    return "–" if v is None else f"{100 * v:.0f} %"


def render_unknown(doc: dict, command: str = "") -> str:
    """`bench --unknown`: the header and the never-seen section (no matrix was measured)."""
    lines = [f"# Benchmarks on `{doc['disk']}`: apps never recorded (issue 7)", "",
             "Generated by `warmstart bench --unknown`; do not edit by hand. Reproduce with:", "",
             f"    {command or 'warmstart bench --unknown --disk ' + doc['disk']}", "",
             f"- bench run `{doc['bench_id']}`, disk `{doc['disk']}`, {doc['reps']} repetitions per mode, "
             f"kernel {doc['kernel']}, {time.strftime('%Y-%m-%d %H:%M', time.localtime(doc['started_at']))}",
             f"- took {(doc.get('finished_at', doc['started_at']) - doc['started_at']) / 60:.1f} min"]
    lines += unknown_section(doc["unknown"])
    if doc["problems"]:
        lines += ["", "## Problems", ""] + [f"- {p}" for p in doc["problems"]]
    return "\n".join(lines) + "\n"


def unknown_section(u: dict) -> list:
    """Never-seen launches: cold vs each fallback mechanism, accuracy and waste (bench/unknown.py)."""
    modes = u["modes"]
    res = u.get("results") or {"apps": {}, "targets": [], "per_mechanism": {}, "chosen": None}
    lines = ["", "## Apps never recorded: speculation and online prefetching", "",
             "No recording or schedule: each launch through `run_fallback_launch` (tracer on in every mode, "
             "cold included), caches dropped before each, mechanisms round-robin per repetition. "
             "Times in s, median (min–max); ratio = median / cold median.", "",
             "| app | " + " | ".join(modes) + " |", "|---|" + "---:|" * len(modes)]
    for name, a in res["apps"].items():
        cells = []
        for m in modes:
            r = a["ratio"].get(m)
            cells.append(_spread(a["times"].get(m)) + ("" if r is None else f" **{r:.2f}×**"))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "Accuracy (prefetched-and-used / used) and waste (prefetched-unused / prefetched), medians; "
              "pages prefetched (used) per source.", "",
              "| app | mode | accuracy | waste | preresolve | speculation | online | copy ended |",
              "|---|---|---:|---:|---:|---:|---:|---|"]
    for name, a in res["apps"].items():
        for m in modes[1:]:
            src = a["by_mechanism"].get(m, {})
            part = lambda k: "–" if k not in src else \
                f"{src[k]['prefetched_pages']:.0f} ({src[k]['prefetched_used_pages']:.0f})"  # noqa: E731
            kills = ", ".join(f"{k} {n}" for k, n in sorted((a.get("copy_killed") or {}).get(m, {}).items()))
            lines.append(f"| {name} | {m} | {_pct(a['accuracy'].get(m))} | {_pct(a['waste'].get(m))} | "
                         f"{part('preresolve')} | {part('speculation')} | {part('online')} | {kills or '–'} |")
    lines += ["", "| mechanism | median ratio over apps | largest ratio |", "|---|---:|---:|"]
    for mech in [m for m in u["mechanisms"] if m in res["per_mechanism"]]:  # JSON may sort the keys
        v = res["per_mechanism"][mech]
        lines.append(f"| {mech} | {_x(v['median_ratio'])} | {_x(v['worst_ratio'])} |")
    lines += ["", f"Mechanism chosen once for all apps: **{res['chosen'] or '–'}** "
              f"({res.get('chosen_because') or 'nothing measured'}).", "", "| criterion | measured | met |",
              "|---|---:|---|"]
    for t in res["targets"]:
        lines.append(f"| {t['criterion']} | {_x(t['measured'])} | "
                     f"{'–' if t['met'] is None else ('yes' if t['met'] else '**no**')} |")
    return lines


def section_key(doc: dict) -> str:
    return "-".join(["unknown" if doc.get("unknown") else "matrix", doc["disk"]]
                    + (["relocate"] if doc.get("relocation") else []) + (["overlay"] if doc.get("overlay") else []))


def section(doc: dict, command: str = "") -> str:
    """This run's tables as one section of docs/benchmarks.md (headings one level down)."""
    key = section_key(doc)
    body = "\n".join(("#" + line) if line.startswith("#") else line
                     for line in render(doc, command or doc.get("command", "")).splitlines())
    return f"<!-- bench:{key} -->\n{body}\n<!-- /bench:{key} -->\n"


def write_markdown(doc: dict, path: Path, command: str = "") -> None:
    """Write this run's section into `path`, replacing the section of an earlier run of the same
    kind on the same disk and keeping the others (hdd7200, ssd, real, unknown...)."""
    key, new = section_key(doc), section(doc, command)
    begin, end = f"<!-- bench:{key} -->", f"<!-- /bench:{key} -->\n"
    path = Path(path)
    try:
        old = path.read_text(encoding="utf-8") if path.exists() else ""
        i, j = old.find(begin), old.find(end)
        if i >= 0 and j > i:
            text = old[:i] + new + old[j + len(end):]
        elif "<!-- bench:" in old:
            text = old.rstrip("\n") + "\n\n" + new
        else:  # a fresh file, or one from before sections: start over
            text = ("# Benchmarks\n\nGenerated by `warmstart bench`, one section per kind of run and "
                    "disk; do not edit by hand.\n\n" + new)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as e:
        raise WarmstartError(f"cannot write {path}: {e.strerror}; pass --markdown PATH")
