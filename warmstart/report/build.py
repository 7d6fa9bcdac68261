"""`warmstart report` as a library call: summaries from the DB, then the table, figures, HTML."""

import re
import os
import tempfile
import time
from pathlib import Path
from typing import Optional, Sequence

from ..db.launches import latest_bench_id
from ..db.schedules import stale_marks
from ..errors import WarmstartError
from . import figures, html, summary, table, timeline


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text) or "app"


def make_figures(conn, launches: list, summaries: list, plot_dir: Path, progress=None) -> list:
    """Write all figures into plot_dir; returns [(caption, png_path, svg_path)]."""
    out = []

    def add(caption, paths):
        if paths:
            out.append((caption, str(paths[0]), str(paths[1])))

    add("Figure: launch time normalised to cold (median, min-max whiskers) per app and method; "
        "the lower bound LB (docs/algorithms.md) marked where its bench run measured it",
        figures.normalised(summaries, plot_dir / "normalised"))
    for s in summaries:
        panels = timeline.pick(conn, launches, s["app"], s["disk"], s["prefetch_method"])
        shown = " vs ".join(p["label"].split(",")[0] for p in panels)
        add(f"Figure: timeline of {s['app']} on {s['disk']}: {shown}",
            figures.timeline(s["app"], panels, plot_dir / f"timeline-{_slug(s['app'])}-{_slug(s['disk'])}"))
        if progress:
            progress()
    apps = sorted({r["app"] for r in launches})
    add("Figure: launch time history per app; dashed lines mark (re-)recordings, dotted lines stale "
        "schedules, x bad feedback verdicts, diamonds launches after which the app was shown degraded",
        figures.history(launches, timeline.recordings_by_app(conn, apps),
                        {app: stale_marks(conn, app) for app in apps}, plot_dir / "history"))
    return out


def build_report(conn, names: Sequence[str] = (), bench_id: Optional[str] = None,
                 disk: Optional[str] = None, prefetch_method: Optional[str] = None,
                 plot_dir: Optional[Path] = None, html_file: Optional[Path] = None,
                 progress=None) -> dict:
    """Everything `warmstart report` prints or writes; returns the JSON document."""
    if bench_id == "latest":
        bench_id = latest_bench_id(conn)
        if bench_id is None:
            raise WarmstartError("no bench run in the database: run `warmstart bench` first, "
                                 "or drop --bench to report all launches")
    launches = summary.load_launches(conn, names, bench_id=bench_id, disk=disk)
    # a bench run carries its own cold launches; everyday use has the recordings as its cold
    recorded = {} if bench_id else summary.recorded_cold(conn, names)
    summary.name_unknown_disks(launches, recorded)
    if disk:
        recorded = {app: ref for app, ref in recorded.items() if ref["disk"] == disk}
    from ..db.launches import latest_sorted_passes
    summaries = summary.summarize(launches, prefetch_method=prefetch_method, recorded=recorded,
                                  sorted_passes=latest_sorted_passes(conn))
    from ..hook.config import load_config
    from ..hook.feedback import degraded
    bad = degraded(conn, load_config())
    for s in summaries:
        s["degraded"] = bad.get(s["app"])
    text = table.render(summaries)
    system = None
    if os.geteuid() != 0:   # a user's own database says little: what the system hook did for them
        from ..hook.layout import system_paths
        from ..hook.users import render, view
        system = view(system_paths())
        text += "\n\n" + render(system)
    doc = {"generated_at": time.time(), "filters": {"apps": list(names), "bench_id": bench_id, "disk": disk},
           "apps": summaries, "table": text, "figures": [], "html": None,
           **({"system_hook": system} if system is not None else {})}
    if plot_dir or html_file:
        with tempfile.TemporaryDirectory(prefix="warmstart-report-") as tmp:
            target = Path(plot_dir) if plot_dir else Path(tmp)
            figs = make_figures(conn, launches, summaries, target, progress)
            if plot_dir:
                doc["figures"] = [{"caption": c, "png": p, "svg": v} for c, p, v in figs]
            if html_file:
                meta = {"generated": time.strftime("%Y-%m-%d %H:%M:%S"),
                        "apps": ", ".join(names) or "all", "bench run": bench_id or "all launches",
                        "disk": disk or "all", "launches": len(launches)}
                page = html.render("warmstart launch report", text, [(c, p) for c, p, _ in figs], meta)
                try:
                    Path(html_file).write_text(page, encoding="utf-8")
                except OSError as e:
                    raise WarmstartError(f"cannot write {html_file}: {e.strerror}; pick a writable path")
                doc["html"] = str(html_file)
    return doc
