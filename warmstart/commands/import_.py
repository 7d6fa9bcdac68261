"""`warmstart import app.wsched`: an exported schedule re-mapped to this machine's disk (portable/)."""

import os
import sys

import click

from ..cli import emit, json_option
from ..errors import WarmstartError
from ..portable.import_ import import_schedule


def _prefix(ctx, param, values):
    out = []
    for v in values:
        old, sep, new = v.partition("=")
        if not sep or not old.startswith("/") or not new.startswith("/"):
            raise click.BadParameter(f"{v!r}: use OLD=NEW with two absolute paths")
        out.append((os.fsencode(old), os.fsencode(new)))
    return out


def _text(r, dry_run) -> str:
    what = "would store" if dry_run else f"stored schedule #{r.schedule_id} as the active one of"
    lines = [f"{what} {r.app}{' (new app)' if r.created_app else ''}: {r.files} files, {r.ranges} ranges, "
             f"{r.bytes / 1e6:.1f} MB in {r.segments} segments, t_exp {r.t_exp_s:.3f} s ({r.cost_model})",
             f"  metadata: {r.metadata_ranges} ranges ({r.metadata_bytes / 1e3:.0f} kB) derived from the local file system; "
             f"{r.dropped_device_ranges} device ranges of the export not used"]
    if r.metadata_note:
        lines.append(f"  note: {r.metadata_note}")
    if r.refused_files:
        lines.append(f"  refused {r.refused_files} files ({r.refused_ranges} ranges, {r.refused_bytes / 1e6:.1f} MB) "
                     f"that differ here:")
        lines += [f"    {p}: {why}" for p, why in sorted(r.refused.items())]
    else:
        lines.append("  refused 0 files")
    return "\n".join(lines)


@click.command("import")
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--name", default=None, help="Store under this app name instead of the exported one.")
@click.option("--map-prefix", "prefix_map", multiple=True, callback=_prefix, metavar="OLD=NEW",
              help="Files under OLD on the exporting machine are under NEW here; repeatable.")
@click.option("--no-metadata", is_flag=True, help="Do not derive inode/directory blocks from the local ext4.")
@click.option("--dry-run", is_flag=True, help="Check and re-map, but store nothing.")
@json_option
@click.pass_obj
def import_(ctx, file, name, prefix_map, no_metadata, dry_run, as_json):
    """Import a schedule written by `warmstart export`: each file is checked (same size and
    SHA-256 of the scheduled bytes) and its ranges placed with FIEMAP on this disk, then it
    becomes the app's active schedule (the app is created if needed). Files that differ here
    are refused and counted; the rest is imported.

    \b
    Examples:
      warmstart import pyimport.wsched
      warmstart import --map-prefix /srv/a=/srv/b --json app.wsched
      warmstart import --dry-run - < app.wsched
    """
    try:
        if file == "-":
            data = sys.stdin.buffer.read()
        else:
            with open(file, "rb") as f:
                data = f.read()
    except OSError as e:
        raise WarmstartError(f"cannot read {file}: {e.strerror}; give the path of a file from `warmstart export`")
    r = import_schedule(ctx.db, data, name=name, prefix_map=prefix_map, metadata=not no_metadata,
                        save=not dry_run, source=file)
    emit(dict(r.to_json(), dry_run=dry_run), as_json, lambda: _text(r, dry_run))
