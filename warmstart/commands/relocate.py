"""`warmstart relocate NAME...`: lay the apps' launch data out contiguously (see docs/relocation.md)."""

import click

from ..cli import emit, json_option
from ..relocate import relocate_apps
from ..relocate.planner import GRANULARITIES


@click.command("relocate")
@click.argument("names", nargs=-1, required=True)
@click.option("--dry-run", is_flag=True, help="Print what would move and the modelled launch times; change nothing.")
@click.option("--granularity", type=click.Choice(GRANULARITIES), default="auto", show_default=True,
              help="Move whole files, only the launch-touched ranges, or decide per file.")
@json_option
@click.pass_obj
def relocate(ctx, names, dry_run, granularity, as_json):
    """Move the files NAME's schedule reads into one contiguous region, in launch order.

    Shared files (read by several apps' schedules) go first, once, in a common region; each
    app's own files follow in schedule order. Only ext4 is supported (EXT4_IOC_MOVE_EXT: the
    kernel moves data atomically, a crash leaves every file intact). Afterwards the schedules of
    every app reading a moved file are remapped to the new LBAs.

    \b
    Examples:
      warmstart relocate --dry-run firefox
      warmstart relocate gimp inkscape          # one layout for both, shared libs once
      warmstart relocate --granularity file --json gimp
    """
    report = relocate_apps(ctx.db, list(names), dry_run=dry_run, granularity=granularity,
                           progress=None if as_json else lambda m: click.echo(m, err=True))
    emit(report.to_json(), as_json, lambda: _text(report))


def _text(r) -> str:
    verb = "would move" if r.dry_run else "moved"
    lines = [f"{verb} {r.moved_files} files, {r.moved_bytes / 2**20:.1f} MiB "
             f"({len(r.pieces)} pieces, {r.granularity}) on {r.mountpoint} ({r.fs_type}, "
             f"{r.free_bytes / 2**20:.0f} MiB free)"]
    if r.region:
        lines.append(f"region: sector {r.region['start_sector']}, {r.region['extents']} extents, "
                     f"{r.region['discontinuities']} jumps")
    if not r.dry_run:
        lines.append(f"extents of the moved files: {r.extents_before} -> {r.extents_after}")
    for name in r.apps:
        b, a = r.model_before[name], r.model_after[name]
        lines.append(f"{name}: modelled launch {b['launch_s']:.3f} s -> {a['launch_s']:.3f} s, "
                     f"fetch {b['fetch_s']:.3f} s -> {a['fetch_s']:.3f} s, seeks {b['seeks']} -> {a['seeks']} "
                     f"({r.cost_model.get(name)})")
    for x in r.refused:
        lines.append(f"refused {x['path']}: {x['reason']}")
    lines += [f"warning: {w}" for w in r.warnings]
    for x in r.reanalysis:
        lines.append(f"{x['app']}: schedule {x['old_schedule']} -> {x['remapped_schedule']} (analyzer: {x['analyzer']})")
    return "\n".join(lines)
