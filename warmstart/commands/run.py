"""`warmstart run`: launch a command with its recorded schedule prefetched."""


import os
import sys

import click

from ..cli import emit, json_option
from ..errors import WarmstartError
from ..launching import parse_until
from ..replay.process import DEFAULT_ENGINE, ENGINES
from ..replay.runner import run_launch


@click.command(context_settings={"ignore_unknown_options": True})
@click.option("--mode", type=click.Choice(["segmented", "reorder", "interleave", "none"]),
              default="segmented", show_default=True,
              help="segmented: pre-buffer then segments alongside the app; reorder: fetch all "
                   "LBA-sorted, then launch; interleave: original order alongside (FAST); none.")
@click.option("--cold", is_flag=True,
              help="Drop the page cache first (root) and launch without prefetch: stored as the "
                   "app's cold launch, the reference `warmstart report` measures its gain against.")
@click.option("--until", "until_spec", default="exit", show_default=True,
              help="Launch end: exit, idle=SECONDS, stdout=REGEX or file=PATH.")
@click.option("--name", default=None, help="The app's name (default: match CMD against recorded apps).")
@click.option("--engine", type=click.Choice(ENGINES), default=DEFAULT_ENGINE, show_default=True,
              help="How the replayer fetches (see docs/replayer.md for the measurements).")
@click.option("--timeout", type=float, default=120.0, show_default=True, help="Give up after SECONDS.")
@click.option("--measure-use", is_flag=True,
              help="Trace which pages of the scheduled files the launch used and store the prefetch "
                   "accuracy and waste (root, tracefs; see docs/replayer.md).")
@json_option
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_obj
def run(obj, mode, cold, until_spec, name, engine, timeout, measure_use, as_json, cmd):
    """Launch CMD with its schedule prefetched, measure and store the launch.

    CMD's output and exit status are passed through unchanged; the summary goes to stderr
    (with --json: CMD's output is captured into the JSON document on stdout instead).

    \b
    Examples:
      warmstart run -- python3 -c 'import json, email, asyncio'
      warmstart run --mode reorder --name pyimport -- python3 -c 'import json, email, asyncio'
      warmstart run --until 'stdout=^ready' --json -- ./server --port 0
      warmstart run --measure-use -- python3 -c 'import json, email, asyncio'
      sudo warmstart run --cold -- python3 -c 'import json, email, asyncio'
    """
    until = parse_until(until_spec)
    if cold:
        from ..recorder.coldcache import drop_caches
        if os.geteuid() != 0:
            raise WarmstartError("--cold drops the page cache, which needs root: run it with sudo "
                                 "(or launch without --cold)")
        mode = "none"
        drop_caches()
    out = run_launch(obj.db, list(cmd), mode, until, name=name, engine=engine, timeout=timeout,
                     passthrough=not as_json, kill_at_end=False, measure_use=measure_use,
                     record_mode="cold" if cold else None)
    if as_json:
        emit(out.to_json(), True)
    else:
        for note in out.notes:
            click.echo(f"warmstart: {note}", err=True)
        st = out.replay_stats or {}
        fetched = st.get("bytes_fetched", 0) / 2**20
        click.echo(f"warmstart: {out.app_name or '(unknown app)'} mode={'cold' if cold else mode} launch {out.launch_time_s:.3f} s "
                   f"(pre-buffer {out.prebuffer_s:.3f} s, app {out.app_time_s:.3f} s, "
                   f"fetched {fetched:.1f} MiB, end: {out.end_reason})", err=True)
        if out.page_use:
            pu = out.page_use
            pct = lambda x: "-" if x is None else f"{100 * x:.0f}%"  # noqa: E731
            click.echo(f"warmstart: used {pu['used_bytes'] / 2**20:.1f} MiB of file pages, prefetched "
                       f"{pu['prefetched_bytes'] / 2**20:.1f} MiB: accuracy {pct(pu['accuracy'])}, "
                       f"waste {pct(pu['waste'])}", err=True)
    status = out.exit_status
    if status is None:
        sys.exit(0)
    sys.exit(128 + (-status) if status < 0 else status)



