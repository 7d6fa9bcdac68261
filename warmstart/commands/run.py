"""`warmstart run`: launch a command with its recorded schedule prefetched."""


import sys

import click

from ..cli import json_option
from ..replay.process import DEFAULT_ENGINE, ENGINES
from .run_body import DEFAULT_MODE, DEFAULT_TIMEOUT_S, DEFAULT_UNTIL, MODES, execute


@click.command(context_settings={"ignore_unknown_options": True})
@click.option("--mode", type=click.Choice(MODES), default=DEFAULT_MODE, show_default=True,
              help="segmented: pre-buffer then segments alongside the app; reorder: fetch all "
                   "LBA-sorted, then launch; interleave: original order alongside (FAST); none.")
@click.option("--cold", is_flag=True,
              help="Drop the page cache first (root) and launch without prefetch: stored as the "
                   "app's cold launch, the reference `warmstart report` measures its gain against.")
@click.option("--until", "until_spec", default=DEFAULT_UNTIL, show_default=True,
              help="Launch end: exit, idle=SECONDS, stdout=REGEX or file=PATH.")
@click.option("--name", default=None, help="The app's name (default: match CMD against recorded apps).")
@click.option("--engine", type=click.Choice(ENGINES), default=DEFAULT_ENGINE, show_default=True,
              help="How the replayer fetches (see docs/replayer.md for the measurements).")
@click.option("--timeout", type=float, default=DEFAULT_TIMEOUT_S, show_default=True, help="Give up after SECONDS.")
@click.option("--measure-use", is_flag=True,
              help="Trace which pages of the scheduled files the launch used and store the prefetch "
                   "accuracy and waste (root, tracefs; see docs/replayer.md).")
@click.option("--no-fs-metadata", is_flag=True,
              help="Skip the replayer's metadata step (XFS, btrfs: opening the scheduled files and "
                   "reading their directories first); to measure what it gains (docs/replayer.md).")
@json_option
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_obj
def run(obj, mode, cold, until_spec, name, engine, timeout, measure_use, no_fs_metadata, as_json, cmd):
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
    sys.exit(execute(lambda: obj.db, cmd, mode=mode, cold=cold, until_spec=until_spec, name=name,
                     engine=engine, timeout=timeout, measure_use=measure_use, as_json=as_json,
                     fs_metadata=not no_fs_metadata))
