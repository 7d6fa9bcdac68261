"""The report's figures (matplotlib, Agg), each written as PNG and SVG.

1. normalised(): launch time per app and method relative to cold, min-max error bars, the lower
   bound marked (paper Fig. 3).
2. timeline(): CPU and disk usage and each request's LBA over a launch, cold vs prefetched,
   segment boundaries marked (paper Fig. 4).
3. history(): launch time over days per app; re-recordings, stale schedules, bad feedback verdicts
   and degraded apps marked.

Grayscale-readable: methods differ by hatch and gray level, series by line style and marker,
never by colour alone.
"""

import datetime as dt
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: no display on servers and in CI
import matplotlib.pyplot as plt  # noqa: E402

from .summary import METHOD_ORDER, timed, unprefetched  # noqa: E402

STYLE = {  # method: (gray fill, hatch, marker)
    "cold": ("0.15", "", "o"),
    "cold-traced": ("0.35", "xx", "x"),
    "interleave": ("0.55", "//", "s"),
    "reorder": ("0.75", "\\\\", "^"),
    "segmented-paper": ("0.9", "..", "v"),
    "segmented": ("1.0", "++", "D"),
    "hook": ("0.85", "||", "h"),
    "warm": ("0.45", "--", "*"),
}
DEFAULT_STYLE = ("0.6", "oo", "P")


def _save(fig, stem: Path) -> list:
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = []
    for ext in ("png", "svg"):
        p = stem.with_suffix("." + ext)
        fig.savefig(p, dpi=110, bbox_inches="tight")
        paths.append(p)
    plt.close(fig)
    return paths


def _legend_outside(ax, handles=None, labels=None, ncol=1):
    """The legend to the right of the axes, outside them: it never covers a data point."""
    if handles is None:
        handles, labels = ax.get_legend_handles_labels()
    if handles:
        ax.legend(handles, labels, fontsize=7, ncol=ncol, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                  borderaxespad=0.0, frameon=False)


def normalised(summaries, stem: Path) -> list:
    """Bars of median launch time / cold median per app and method; whiskers span min..max."""
    rows = [s for s in summaries if s["cold"] and s["cold"]["median"] > 0]
    if not rows:
        return []
    methods = [m for m in METHOD_ORDER if any(m in s["methods"] for s in rows)]
    methods += sorted({m for s in rows for m in s["methods"]} - set(methods))
    width = 0.8 / len(methods)
    fig, ax = plt.subplots(figsize=(max(6, 1.4 * len(rows) * len(methods) / 4 + 3), 4.2))
    for j, m in enumerate(methods):
        gray, hatch, _ = STYLE.get(m, DEFAULT_STYLE)
        xs, ys, lo, hi = [], [], [], []
        for i, s in enumerate(rows):
            st = s["methods"].get(m)
            if not st:
                continue
            c = s["cold"]["median"]
            xs.append(i + (j - (len(methods) - 1) / 2) * width)
            ys.append(st["median"] / c)
            lo.append((st["median"] - st["min"]) / c)
            hi.append((st["max"] - st["median"]) / c)
        ax.bar(xs, ys, width, color=gray, hatch=hatch, edgecolor="black", linewidth=0.6, label=m,
               yerr=[lo, hi], capsize=2, error_kw={"elinewidth": 0.8})
    ax.axhline(1.0, color="black", linestyle=":", linewidth=0.8)
    # the lower bound (analyzer/bound.py, measured in the bench run of these launches): a thick
    # line across each app's group of bars
    lb = [(i, s["bound_s"] / s["cold"]["median"]) for i, s in enumerate(rows) if s.get("bound_s")]
    for k, (i, y) in enumerate(lb):
        ax.hlines(y, i - 0.45, i + 0.45, colors="black", linewidth=2.2, zorder=5,
                  label="lower bound (LB)" if k == 0 else None)
    ax.set_xticks(range(len(rows)))
    many_disks = len({s["disk"] for s in rows}) > 1
    ax.set_xticklabels([f"{s['app']}\n({s['disk']})" if many_disks else s["app"] for s in rows],
                       fontsize=8)
    ax.set_ylabel("launch time / cold launch time (ratio)")
    ax.set_xlabel("application")
    ax.set_title("How much of the cold launch time is left: lower is better\n"
                 "(bars: median / cold median, whiskers: min-max; dotted line: cold"
                 + ("; thick line: LB)" if lb else ")"), fontsize=10)
    _legend_outside(ax)
    ax.set_ylim(0, max(1.1, ax.get_ylim()[1]))
    return _save(fig, stem)


def timeline(app: str, series: list, stem: Path) -> list:
    """One panel per launch (e.g. cold, segmented): CPU and disk usage in % on the left axis,
    each request's LBA (as % of the device) as dots on the right axis, segment ends as lines.

    series items: {"label", "period_s", "cpu": [fractions], "disk": [fractions],
    "requests": [[t_s, sector], ...], "segments_s": [t_s, ...], "dev_sectors": int|None}."""
    series = [s for s in series if s]
    if not series:
        return []
    tmax = max(max(len(s["cpu"]), len(s["disk"])) * s["period_s"] for s in series) or 1.0
    fig, axes = plt.subplots(len(series), 1, figsize=(8, 2.4 * len(series) + 0.9), sharex=True,
                             squeeze=False, layout="constrained")
    for ax, s in zip(axes[:, 0], series):
        p = s["period_s"]
        ax.fill_between([i * p for i in range(len(s["disk"]))], [100 * v for v in s["disk"]],
                        step="post", color="0.8", hatch="////", edgecolor="0.5", linewidth=0,
                        label="disk busy (%)")
        ax.step([i * p for i in range(len(s["cpu"]))], [100 * v for v in s["cpu"]], where="post",
                color="black", linewidth=1.0, label=s.get("cpu_what", "CPU busy (%)"))
        ax.set_ylim(0, 105)
        ax.set_ylabel("usage (%)")
        for k, t in enumerate(s.get("segments_s") or []):
            ax.axvline(t, color="black", linestyle="--", linewidth=0.8,
                       label="segment boundary" if k == 0 else None)
        lba_ax = ax.twinx()
        reqs = s.get("requests") or []
        if reqs:
            top = s.get("dev_sectors") or max(r[1] for r in reqs) or 1
            lba_ax.scatter([r[0] for r in reqs], [100 * r[1] / top for r in reqs], s=5, marker="x",
                           color="0.3", linewidths=0.6, label="request LBA")
        lba_ax.set_ylim(0, 105)
        lba_ax.set_ylabel("LBA (% of disk)")
        lba_ax.set_zorder(ax.get_zorder() + 1)  # the LBA marks above the usage areas, not hidden
        ax.set_title(f"{app}: {s['label']}", fontsize=9)
        handles = ax.get_legend_handles_labels()
        h2 = lba_ax.get_legend_handles_labels()
        legend = {label: h for h, label in zip(handles[0] + h2[0], handles[1] + h2[1])}
    axes[-1, 0].set_xlabel("time since launch start (s)")
    axes[-1, 0].set_xlim(0, tmax)
    # below the panels (the right-hand side holds the LBA axis): it never covers data
    fig.legend(list(legend.values()), list(legend), loc="outside lower center", ncol=len(legend), fontsize=7,
               frameon=False)
    what = ("the cold launch's scattered requests (a seek each) against the prefetched launch"
            if len(series) > 1 else "where on the disk each request of the launch went, and when")
    fig.suptitle(f"{app}: {what}\n(CPU and disk busy %, request LBAs as x)", fontsize=10)
    return _save(fig, stem)


def history(launches: list, recordings: dict, stale: dict, stem: Path) -> list:
    """Launch time against date per app and method; vertical lines where the app was re-recorded
    and where a schedule went stale; marks on the launches judged bad and on those after which the
    app was kept but shown degraded.

    launches: rows with app, method, started_at, launch_time_s; recordings: app -> [started_at];
    stale: app -> [(stale_at, reason)]."""
    # A failed or unprefetched launch is no measurement of its method.
    launches = [r for r in launches if r["exit_status"] in (0, None) and not unprefetched(r)]
    # a launch without an exact time is no point on the time axis: a tick at the bottom instead
    untimed = [r for r in launches if not timed(r)]
    launches = [r for r in launches if timed(r)]
    apps = sorted({r["app"] for r in launches + untimed})
    if not apps:
        return []
    fig, axes = plt.subplots(len(apps), 1, figsize=(8, 2.3 * len(apps) + 0.9), squeeze=False,
                             sharex=True, layout="constrained")
    for ax, app in zip(axes[:, 0], apps):
        rows = [r for r in launches if r["app"] == app]
        for m in [m for m in METHOD_ORDER if any(r["method"] == m for r in rows)] + \
                sorted({r["method"] for r in rows} - set(METHOD_ORDER)):
            pts = [r for r in rows if r["method"] == m]
            _, _, marker = STYLE.get(m, DEFAULT_STYLE)
            ax.plot([dt.datetime.fromtimestamp(r["started_at"]) for r in pts],
                    [r["launch_time_s"] for r in pts], marker=marker, linestyle="-", linewidth=0.6,
                    markersize=4, color="black", markerfacecolor="white", label=m)
        # hooked launches the feedback judged bad (a missed pre-buffer): marked over their point;
        # after several in a row the app is re-learned (stale) or shown degraded (docs/hook.md)
        bad = [r for r in rows if _feedback(r).get("bad")]
        if bad:
            ax.plot([dt.datetime.fromtimestamp(r["started_at"]) for r in bad], [r["launch_time_s"] for r in bad],
                    linestyle="none", marker="x", markersize=9, color="black", markeredgewidth=1.6,
                    label="bad verdict (feedback)", zorder=5)
        # several bad verdicts in a row with learn = "off": still prefetched, shown degraded
        worse = [r for r in rows if _feedback(r).get("action") == "degraded"]
        if worse:
            ax.plot([dt.datetime.fromtimestamp(r["started_at"]) for r in worse],
                    [r["launch_time_s"] for r in worse], linestyle="none", marker="D", markersize=11,
                    markerfacecolor="none", color="black", markeredgewidth=1.0,
                    label="degraded from here (kept)", zorder=4)
        missing = [r for r in untimed if r["app"] == app]
        if missing:
            ax.plot([dt.datetime.fromtimestamp(r["started_at"]) for r in missing], [0] * len(missing),
                    linestyle="none", marker="|", markersize=12, color="black", markeredgewidth=1.4,
                    label="not timed (no exact time)", zorder=5, clip_on=False)
        for k, t in enumerate(recordings.get(app, [])):
            ax.axvline(dt.datetime.fromtimestamp(t), color="0.4", linestyle="--", linewidth=0.9,
                       label="(re-)recorded" if k == 0 else None)
        for k, (t, _) in enumerate(stale.get(app, [])):
            ax.axvline(dt.datetime.fromtimestamp(t), color="black", linestyle=":", linewidth=1.4,
                       label="went stale (not prefetched until re-learned)" if k == 0 else None)
        ax.set_ylabel("launch time (s)")
        ax.set_ylim(bottom=0)
        ax.set_title(f"{app}", fontsize=9)
        _legend_outside(ax)
    axes[-1, 0].set_xlabel("date and time of the launch (local)")
    for label in axes[-1, 0].get_xticklabels():
        label.set(rotation=30, ha="right")
    keys = ["dashed lines: the app was (re-)recorded"]
    if any(stale.get(app) for app in apps):
        keys.append("dotted: its schedule went stale")
    if any(_feedback(r).get("bad") for r in launches):
        keys.append("x: the feedback judged the launch bad")
    if any(_feedback(r).get("action") == "degraded" for r in launches):
        keys.append("diamond: shown degraded, still prefetched")
    if untimed:
        keys.append(f"|: {len(untimed)} launch(es) not timed, left out")
    fig.suptitle("Launch times over time per application: does the gain last?\n(" + "; ".join(keys) + ")",
                 fontsize=10)
    return _save(fig, stem)


def _feedback(row: dict) -> dict:
    return (row.get("details") or {}).get("feedback") or {}
