"""`warmstart bench`: run the comparison matrix and write docs/benchmarks.md."""

import shlex
import sys
from pathlib import Path

import click

from ..bench import apps as appcat
from ..bench.matrix import ALL_MODES, DISKS, BenchConfig, run_bench
from ..cli import emit, json_option
from ..db.connection import database_file
from ..emudisk.image import FILE_SYSTEMS
from ..paths import checkout_root
from ..report.markdown import render


def _split(value):
    return [x for x in (value or "").split(",") if x]


@click.command("bench")
@click.option("--disk", type=click.Choice(DISKS), default="hdd7200", show_default=True,
              help="Emulated 7200 rpm HDD, emulated SSD, or this machine's own disk.")
@click.option("--apps", "app_names", metavar="LIST",
              help=f"Comma-separated built-in apps (default all: {', '.join(appcat.catalogue())}).")
@click.option("--app", "extra_apps", multiple=True, metavar="NAME=COMMAND",
              help="Add an app; on an emulated disk COMMAND runs chrooted in its system image.")
@click.option("--layout", type=click.Choice(["packaged", "random"]), default="packaged", show_default=True,
              help="The emulated disk's system image: packaged (files package by package, a tenth of "
                   "the drive) or random (every file in random order, at full stroke); docs/benchmarks.md.")
@click.option("--fs", type=click.Choice(FILE_SYSTEMS), default="ext4", show_default=True,
              help="The emulated disk's file system: its system image in ext4, XFS or btrfs (the same files "
                   "in the same order); named in the run's disk label (hdd7200.xfs) unless ext4.")
@click.option("--overlay", is_flag=True,
              help="Also launch every app from an overlayfs whose lower layer is the emulated disk's file "
                   "system (upper and work dirs on tmpfs), as a container does, named APP@overlay; its "
                   "results compare each mode with the same launch from the lower file system.")
@click.option("--hook-launches", default=5, show_default=True, type=click.IntRange(min=1),
              help="hook mode: plain launches per app, warmstartd and its learner running, "
                   "spread over the repetitions (each after the repetition's other modes).")
@click.option("--reps", default=5, show_default=True, type=int, help="Repetitions of every mode.")
@click.option("--modes", metavar="LIST", default=",".join(ALL_MODES), show_default=True,
              help="Comma-separated modes to measure.")
@click.option("--timeout", default=120.0, show_default=True, help="Seconds one launch may take.")
@click.option("--no-timeline", is_flag=True, help="Do not sample repetition 1 for the timeline figure.")
@click.option("--markdown", type=click.Path(dir_okay=False),
              help="Markdown file to update: this run's tables replace the section of the same kind "
                   "of run and disk [default: docs/benchmarks.md when run from a source checkout; "
                   "an installed warmstart writes none unless asked].")
@click.option("--relocate", is_flag=True,
              help="After the matrix, relocate every app in one `relocate` call on the emulated disk, "
                   "then measure reorder and segmented again (issue 9's targets; docs/relocation.md).")
@click.option("--relocate-one", metavar="APP",
              help="Before that (or alone), relocate APP only and measure the other apps' segmented launches.")
@click.option("--unknown", is_flag=True,
              help="Instead of the matrix: launch every app as never seen (no recording or schedule), "
                   "cold and with the fallback mechanisms spec, online, both (issue 7; docs/speculation.md).")
@click.option("--reprofile", is_flag=True,
              help="Measure the emulated disk's profile even if an earlier run kept one of its model "
                   "(in /var/cache/warmstart/profiles).")
@json_option
@click.pass_obj
def bench(ctx, disk, layout, fs, overlay, hook_launches, app_names, extra_apps, reps, modes, timeout, no_timeline, markdown, relocate,
          relocate_one, unknown, reprofile, as_json):
    """Measure cold, interleave, reorder, segmented (paper and ours) and warm launches.

    Brings up the disk, records and analyzes each app once, then runs every mode REPS times,
    round-robin, checking each launch's exit status and output against a plain run. Launches
    are stored under one bench id: `warmstart report --bench latest` shows them.

    \b
    Examples:
      warmstart bench --disk hdd7200
      warmstart bench --disk hdd7200 --apps synth --reps 1
      warmstart bench --disk ssd --apps python,gcc --modes cold,reorder,segmented,warm
      warmstart bench --disk real --app ls='ls -l /usr/bin' --json > bench.json
      warmstart bench --disk hdd7200 --modes cold,reorder,segmented --relocate --relocate-one python
      warmstart bench --disk hdd7200 --unknown --reps 5
      warmstart bench --disk hdd7200 --layout random --modes cold,reorder,reorder-ours,segmented,hook,warm
      warmstart bench --disk hdd7200 --fs xfs --layout random --modes cold,segmented,hook,warm
      warmstart bench --disk hdd7200 --fs btrfs --overlay --apps python --modes cold,segmented,hook
    """
    if unknown and (relocate or relocate_one):
        raise click.UsageError("--unknown measures apps never recorded: it cannot be combined with --relocate")
    if markdown is None and checkout_root() is not None:
        markdown = str(checkout_root() / "docs" / "benchmarks.md")
    cfg = BenchConfig(disk=disk, apps=appcat.select(_split(app_names), extra_apps), reps=reps,
                      modes=_split(modes), timeout=timeout, timeline=not no_timeline, markdown=None,
                      relocate=relocate, relocate_one=relocate_one, unknown=unknown, layout=layout,
                      hook_launches=hook_launches, fs=fs, overlay=overlay, reprofile=reprofile)
    conn = ctx.db
    n_apps = len(cfg.apps) * (2 if overlay else 1)
    steps = n_apps * (1 + reps * (4 if unknown else len([m for m in cfg.modes if m != "hook"])))
    steps += n_apps * hook_launches * ("hook" in cfg.modes and not unknown)
    steps += reps * (len(cfg.apps) * 2 * relocate + (len(cfg.apps) - 1) * bool(relocate_one))
    say = (lambda msg: click.echo(msg, err=True))
    with click.progressbar(length=steps, label="bench", file=click.get_text_stream("stderr"),
                           item_show_func=lambda x: x) as bar:
        doc = run_bench(conn, ctx.db_path or database_file(conn), cfg,
                        say=say, progress=lambda label: bar.update(1, label))
    doc["command"] = "warmstart " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    if markdown:
        from ..report.markdown import write_markdown
        write_markdown(doc, Path(markdown), doc["command"])
        doc["markdown"] = markdown
    emit(doc, as_json, lambda: render(doc, doc["command"]))
    if doc["problems"]:
        raise click.ClickException(f"{len(doc['problems'])} launches were incorrect or not prefetched "
                                   f"(listed above): these results are not valid")
