"""`warmstart recordings`: list stored recordings, optionally of one app."""

import datetime

import click

from ..cli import emit, json_option
from ..db import recordings as store
from ..errors import WarmstartError


@click.command("recordings")
@click.argument("name", required=False)
@click.option("--prune", is_flag=True,
              help="Delete superseded recordings (replaced by a re-recording after the app changed).")
@click.option("--keep", type=click.IntRange(min=1), default=None,
              help="With --prune: also keep only the newest N current recordings of each app.")
@json_option
@click.pass_obj
def recordings(ctx, name, prune, keep, as_json):
    """List recordings (all apps, or app NAME) with their size, launch time and status.

    \b
    Examples:
      warmstart recordings
      warmstart recordings pyimport --json
      warmstart recordings --prune             # drop superseded recordings
      warmstart recordings pyimport --prune --keep 3
    """
    if keep is not None and not prune:
        raise WarmstartError("--keep goes with --prune: warmstart recordings --prune --keep N")
    conn = ctx.db
    app_id = None
    if name:
        app = store.get_app(conn, name)
        if app is None:
            raise WarmstartError(f"no app named {name!r}: record it first with "
                                 f"`warmstart record --name {name} -- CMD`")
        app_id = app["id"]
    deleted = store.prune_recordings(conn, app_id, keep) if prune else []
    rows = store.list_recordings(conn, app_id)
    items = [{"id": r["id"], "app": r["app_name"], "started_at": r["started_at"],
              "launch_time_s": r["launch_time_s"], "end_reason": r["end_reason"], "requests": r["n_requests"],
              "read_bytes": r["read_bytes"], "backend": r["backend"], "cold_method": r["cold_method"],
              "status": r["status"], "lost_events": r["lost_events"],
              "superseded_by": r["superseded_by"]} for r in rows]

    def text():
        if not items:
            return "no recordings yet: warmstart record --name NAME -- CMD"
        out = [f"pruned {len(deleted)} recording(s): {deleted}"] if prune else []
        out += [f"{'id':>4}  {'app':<16} {'when':<19} {'launch':>8} {'reqs':>6} {'read MiB':>8}  status"]
        for i in items:
            when = datetime.datetime.fromtimestamp(i["started_at"]).strftime("%Y-%m-%d %H:%M:%S")
            out.append(f"{i['id']:>4}  {i['app']:<16} {when:<19} {i['launch_time_s']:>7.3f}s {i['requests']:>6} "
                       f"{i['read_bytes'] / 1048576:>8.1f}  {i['status']} ({i['cold_method']}, {i['backend']})"
                       + (f", superseded by {i['superseded_by']}" if i["superseded_by"] else ""))
        return "\n".join(out)

    emit({"recordings": items, "pruned": deleted} if prune else items, as_json, text)
