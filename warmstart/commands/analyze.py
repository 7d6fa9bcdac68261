"""`warmstart analyze NAME`: turn an app's recordings into a prefetch schedule."""

import click

from ..analyzer.analyze import ALGORITHMS, PROBES, Options, analyze as run_analysis
from ..cli import emit, json_option
from .show import step_where
from ..hook import manage as hook_manage


def _text(r):
    lines = [f"schedule #{r['schedule_id']} for {r['app']}: {r['algorithm']} algorithm, {r['probe']} probes",
             f"  {r['requests']} requests, {len(r['segments'])} segments, {r['total_bytes'] / 1e6:.1f} MB "
             f"({r['waste_bytes'] / 1e6:.2f} MB gap waste), {r['files']} files",
             f"  t_exp {r['t_exp_s']:.3f} s   (recorded cold launch {r['cold_launch_s']:.3f} s)"]
    meta = r.get("metadata_step")
    if meta and meta["reads"]:
        lines.append(f"  metadata step through the file system: {len(meta['reads'])} reads the launch made, "
                     f"{step_where(meta)}")
    if r.get("metadata_positions"):
        lines.append(f"  metadata step in the disk order of {r['metadata_positions']} inodes (their places as of now)")
    fm = r["filemap"]
    if fm.get("inline_files"):
        lines.append(f"  {fm['inline_files']} file(s) read with their data inline in the file system's metadata: "
                     f"{fm['inline_placed']} placed in the segment whose reads first needed them (read by the metadata step's "
                     f"seeks)")
    looked = r.get("name_lookups") or {}
    if looked.get("dirs"):
        lines.append(f"  directories the launch looked names up in, off the schedule's paths: {looked['listed']} "
                     f"read whole by that step, {looked['too_big']} left to the app (more blocks than names looked up)")
    for name, c in r["compare"].items():
        extra = f", disk {c['t_disk_s']:.3f} s" if "t_disk_s" in c else ""
        lines.append(f"  {name:<8} modelled {c['t_model_s']:.3f} s{extra}")
    if fm["skipped_files"]:
        lines.append(f"  {fm['skipped_files']} file(s) skipped (deleted or changed since recording); "
                     f"{fm['dropped_unmapped_bytes']} unmapped bytes dropped")
    if r.get("model_error") and r["model_error"]["median"] is not None:
        e = r["model_error"]
        lines.append(f"  model error vs disk: median {e['median']:+.1%} (min {e['min']:+.1%}, max {e['max']:+.1%})")
    for d, why in r.get("unprobed_devices", {}).items():
        lines.append(f"  device {d} not timed on the disk ({why})")
    if r.get("fallback"):
        lines.append(f"  note: {r['fallback']}")
    if r.get("profiled"):
        lines.append(f"  disk profile: {r['profiled']} (kept for later analyses)")
    lines.append(f"  analysis took {r['analysis_s']:.2f} s")
    return "\n".join(lines)


@click.command("analyze")
@click.argument("name")
@click.option("--probe", type=click.Choice(PROBES), default="auto", show_default=True,
              help="How DISK_ACCESS is measured: model (device profile, no I/O), disk (O_DIRECT reads), "
                   "hybrid (model search, disk confirmation); auto = hybrid with a profile, else disk.")
@click.option("--algorithm", type=click.Choice(ALGORITHMS), default="optimal", show_default=True,
              help="optimal: minimise modelled launch time; paper: Algorithm 1 of Joo et al.; "
                   "reorder: one segment, fetched before the launch (the papers' baseline).")
@click.option("--runs-threshold", "-k", type=int, default=None,
              help="Keep blocks seen in at least K of the N recordings (default: a majority).")
@click.option("--recording", "recording_ids", type=int, multiple=True, help="Use only these recording ids.")
@click.option("--allow-lost", is_flag=True, help="Accept recordings that lost trace events.")
@click.option("--no-metadata-first", is_flag=True, help="One LBA sweep per segment (the paper's SORT).")
@click.option("--no-file-metadata", is_flag=True,
              help="Only the metadata the recording saw, not each file's inode/directory blocks from the fs.")
@click.option("--step-first", is_flag=True,
              help="XFS, btrfs: the replayer's metadata step all before segment 1, as before 2026-11-29, "
                   "not split by segment (to measure the split).")
@click.option("--no-gap-merge", is_flag=True, help="Do not read through small gaps.")
@click.option("--keep-unused", is_flag=True,
              help="Also fetch what the recorded launch read but never used (its readahead).")
@click.option("--strip-size", type=int, default=None, help="Strip size in bytes of a striped array.")
@click.option("--stripe-disks", type=int, default=None, help="Member disks of the striped array.")
@click.option("--dry-run", is_flag=True, help="Analyze but do not store the schedule.")
@json_option
@click.pass_obj
def analyze(ctx, name, probe, algorithm, runs_threshold, recording_ids, allow_lost, no_metadata_first,
            no_file_metadata, step_first, no_gap_merge, keep_unused, strip_size, stripe_disks, dry_run, as_json):
    """Build the prefetch schedule of app NAME from its recordings.

    \b
    Examples:
      warmstart analyze pyimport                      # profile exists: hybrid, else disk probes
      warmstart analyze pyimport --probe model        # no disk I/O (needs profile-disk first)
      warmstart analyze pyimport --algorithm paper --probe disk --json
      warmstart analyze pyimport -k 3 --strip-size 65536 --stripe-disks 4
    """
    opts = Options(probe=probe, algorithm=algorithm, runs_threshold=runs_threshold,
                   recording_ids=recording_ids, allow_lost=allow_lost, metadata_first=not no_metadata_first,
                   file_metadata=not no_file_metadata, step_by_segment=not step_first, gap_merge=not no_gap_merge,
                   trim_unused=not keep_unused, strip_bytes=strip_size, stripe_disks=stripe_disks,
                   save=not dry_run)
    say = None if as_json else (lambda s: click.echo(f"... {s}", err=True))
    r = run_analysis(ctx.db, name, opts, progress=say)
    r["hook"] = None if dry_run else hook_manage.refresh_if_installed(ctx.db)  # new schedule → hook index
    emit(r, as_json, lambda: _text(r))
