"""`warmstart report`: launch-time gains as a table, figures and a shareable HTML page."""

from pathlib import Path

import click

from ..cli import emit, json_option
from ..db.recordings import list_apps


@click.command("report")
@click.argument("names", nargs=-1)
@click.option("--bench", "bench_id", metavar="ID|latest",
              help="Only the launches of one `warmstart bench` run ('latest' for the newest).")
@click.option("--disk", help="Only launches on this disk (hdd7200, ssd, real, ...).")
@click.option("--method", "prefetch_method", metavar="METHOD",
              help="Method shown as 'prefetched' (default: segmented, else reorder, else interleave).")
@click.option("--plot", "plot_dir", type=click.Path(file_okay=False),
              help="Write the figures (PNG and SVG) into this directory.")
@click.option("--html", "html_file", type=click.Path(dir_okay=False),
              help="Write one self-contained HTML page (table + figures) to this file.")
@json_option
@click.pass_obj
def report(ctx, names, bench_id, disk, prefetch_method, plot_dir, html_file, as_json):
    """Show cold, prefetched and warm launch times of NAMES (default: every app).

    Per app and disk: medians and spreads, gain = 1 - prefetched/cold, the captured share of
    the possible gain (cold - prefetched)/(cold - warm), t_exp vs measured, bytes prefetched,
    accuracy and waste, schedule age and staleness, and every method relative to cold.

    \b
    Examples:
      warmstart report
      warmstart report pyimport gcc --disk hdd7200
      warmstart report --bench latest --plot /tmp/figs --html /tmp/report.html
      warmstart report --json | jq '.apps[] | {app, gain}'
    """
    from ..report.build import build_report   # matplotlib: not loaded by `warmstart --help`
    conn = ctx.db
    n_apps = len(list_apps(conn))
    if plot_dir or html_file:
        with click.progressbar(length=n_apps + 2, label="drawing figures", file=click.get_text_stream("stderr")) as bar:
            doc = build_report(conn, names, bench_id, disk, prefetch_method,
                               Path(plot_dir) if plot_dir else None, Path(html_file) if html_file else None,
                               progress=lambda: bar.update(1))
    else:
        doc = build_report(conn, names, bench_id, disk, prefetch_method)

    def text():
        lines = [doc["table"]]
        if doc["figures"]:
            lines += ["", f"figures in {plot_dir}:"] + [f"  {f['png']}" for f in doc["figures"]]
        if doc["html"]:
            lines += ["", f"HTML page: {doc['html']}"]
        return "\n".join(lines)

    emit(doc, as_json, text)
