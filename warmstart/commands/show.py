"""`warmstart show NAME`: print an app's active schedule."""

import click

from ..analyzer.bound import of_schedule
from ..cli import emit, json_option
from ..db.schedules import list_schedules, load_active_schedule, load_schedule
from ..errors import WarmstartError


def _bound_line(b) -> str:
    """The lower bound beside t_exp: its value and which part gave it (docs/algorithms.md)."""
    cut = b["cut"]
    parts = []
    if cut:
        parts.append(f"cut after read {cut['k']} of {cut['reads']}: fetch {cut['fetch_s']:.3f} s + CPU "
                     f"{cut['cpu_s']:.3f} s" + ("" if cut["busy_known"] else " (recording without busy times: "
                                                "CPU half unknown, record again)")
                     + ("" if cut.get("timed", True) else " (no disk profile: fetch half untimed; "
                                                          "run `warmstart profile-disk`)"))
    else:
        parts.append("no cut bound (schedule analyzed before it: run `warmstart analyze` again)")
    if b["schedule_pass_s"] is not None:
        parts.append(f"one sorted pass of its reads {b['schedule_pass_s']:.3f} s (modelled)")
    parts.append("warm launch not known here (bench measures it)")
    total = "?" if b["bound_s"] is None else f"{b['bound_s']:.3f} s"
    return f"  lower bound >= {total}: " + "; ".join(parts)


def step_where(meta: dict) -> str:
    """Where a schedule's modelled metadata step (analyzer.access.metadata_step) is counted."""
    if "segments_s" not in meta:
        return f"{meta['t_s']:.3f} s modelled (in t_exp, before segment 1)"
    first, *later = meta["segments_s"]
    return (f"{meta['t_s']:.3f} s modelled, {first:.3f} s of it before segment 1's data, the rest "
            f"in {sum(t > 0 for t in later)} later segment(s) (each in its t_i)")


def _text(s, ranges, b):
    lines = [f"schedule #{s.id} of {s.app_name}: {s.algorithm} / {s.probe}, t_exp {s.t_exp_s:.3f} s, "
             f"{s.total_bytes / 1e6:.1f} MB ({s.waste_bytes / 1e6:.2f} MB waste), {len(s.files)} files"
             + (" [STALE]" if s.stale else ""), _bound_line(b)]
    meta = s.params.get("metadata_step")
    if meta and meta["reads"]:
        lines.append(f"  metadata step through the file system: {len(meta['reads'])} reads, {step_where(meta)}")
    lines.append(f"  {'seg':>3} {'p':>11} {'ranges':>6} {'MB':>7} {'t_i s':>7} {'cpu s':>7}")
    for g in s.segments:
        lines.append(f"  {g.idx:>3} {g.first_p:>5}-{g.last_p:<5} {len(g.ranges):>6} {g.bytes / 1e6:>7.2f} "
                     f"{g.t_disk_s:>7.3f} {g.cpu_s:>7.3f}")
        if ranges:
            for r in g.ranges:
                what = (r.file.path.decode("utf-8", "replace") + f" @{r.file_offset}") if r.file else "metadata"
                lines.append(f"        {r.sector:>12} +{r.nr_sectors:<6} {what}")
    return "\n".join(lines)


@click.command("show")
@click.argument("name")
@click.option("--id", "schedule_id", type=int, default=None, help="Show this schedule instead of the active one.")
@click.option("--all", "list_all", is_flag=True, help="List all schedules of NAME.")
@click.option("--ranges", is_flag=True, help="Also print every range.")
@json_option
@click.pass_obj
def show(ctx, name, schedule_id, list_all, ranges, as_json):
    """Print NAME's schedule: segments, sizes, t_i, CPU, t_exp and the lower bound.

    \b
    Examples:
      warmstart show pyimport
      warmstart show pyimport --ranges
      warmstart show pyimport --all --json
    """
    if list_all:
        rows = list_schedules(ctx.db, name)
        emit(rows, as_json, lambda: "\n".join(
            f"#{r['id']} {r['algorithm']}/{r['probe']} t_exp {r['t_exp_s']:.3f} s "
            f"{r['total_bytes'] / 1e6:.1f} MB{' active' if r['active'] else ''}" for r in rows) or "no schedules")
        return
    s = load_schedule(ctx.db, schedule_id) if schedule_id else load_active_schedule(ctx.db, name)
    if s is None:
        raise WarmstartError(f"{name!r} has no schedule yet: run `warmstart analyze {name}`")
    b = of_schedule(ctx.db, s)
    emit({**s.to_json(), "lower_bound": b}, as_json, lambda: _text(s, ranges, b))
