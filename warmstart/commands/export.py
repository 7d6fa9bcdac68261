"""`warmstart export NAME > app.wsched`: the app's schedule keyed by file identity (portable/)."""

import os
import sys

import click

from ..cli import emit, json_option
from ..errors import WarmstartError
from ..paths import replace_file
from ..portable.export import export_schedule


def _text(r) -> str:
    lines = [f"exported schedule #{r.schedule_id} of {r.app}: {r.files} files, {r.ranges} ranges, "
             f"{r.bytes / 1e6:.1f} MB ({len(r.data)} bytes written)"]
    if r.dropped_device_ranges:
        lines.append(f"  {r.dropped_device_ranges} metadata ranges ({r.dropped_device_bytes / 1e3:.0f} kB) not carried "
                     f"(LBAs are per machine; import re-derives them)")
    if r.skipped_files:
        lines.append(f"  {len(r.skipped_files)} files left out:")
        lines += [f"    {p}: {why}" for p, why in sorted(r.skipped_files.items())]
    return "\n".join(lines)


@click.command("export")
@click.argument("name")
@click.option("-o", "--output", type=click.Path(dir_okay=False, allow_dash=True), default="-",
              help="Write the schedule here instead of standard output.")
@json_option
@click.pass_obj
def export(ctx, name, output, as_json):
    """Write NAME's active schedule as a portable .wsched file: files named by path, size and a
    SHA-256 of the scheduled bytes instead of disk blocks, for `warmstart import` on identical
    machines. The summary goes to standard error when the file goes to standard output.

    \b
    Examples:
      warmstart export pyimport > pyimport.wsched
      warmstart export pyimport -o pyimport.wsched --json
      ssh host2 warmstart import - < pyimport.wsched
    """
    if output == "-" and as_json:
        raise WarmstartError("--json prints the summary to standard output: give the file with -o FILE")
    if output == "-" and sys.stdout.isatty():
        raise WarmstartError("refusing to write a binary schedule to a terminal: redirect it (> FILE) or use -o FILE")
    r = export_schedule(ctx.db, name)
    if output == "-":
        sys.stdout.buffer.write(r.data)
        sys.stdout.buffer.flush()
        click.echo(_text(r), err=True)
        return
    try:   # through a new temp file beside it (O_EXCL, no symlink followed), renamed over it
        replace_file(os.fsencode(output), r.data, 0o644)
    except OSError as e:
        raise WarmstartError(f"cannot write {output}: {e.strerror}; choose another -o path")
    emit(dict(r.to_json(), output=output), as_json, lambda: _text(r))
