"""`warmstart forget NAME`: remove an app and everything stored about it."""

import click

from ..cli import emit, json_option
from ..db import recordings as store
from ..errors import WarmstartError


@click.command("forget")
@click.argument("name")
@json_option
@click.pass_obj
def forget(ctx, name, as_json):
    """Remove app NAME: its recordings, schedules and launches; it is no longer hooked.

    \b
    Examples:
      warmstart forget pyimport
      warmstart forget auto-python3.11-43beb591 --json
    """
    conn = ctx.db
    n = store.count_recordings(conn, name)
    if n is None:
        known = [a["name"] for a in store.list_apps(conn)][:10]
        raise WarmstartError(f"no app named {name!r}" + (f" (known: {', '.join(known)})" if known else "")
                             + ": `warmstart recordings` lists the recorded apps")
    store.delete_app(conn, name)
    from ..hook.manage import refresh_if_installed
    hook = refresh_if_installed(conn)  # its index entry and schedule export go now
    r = {"app": name, "recordings_deleted": n, "hook": hook}

    def text():
        lines = [f"forgot {name}: {n} recording(s), its schedules and launches"]
        if hook and hook.get("error"):
            lines.append(f"warning: {hook['error']}")
        elif hook:
            lines.append(f"hook index refreshed: {len(hook['apps'])} app(s) hooked")
        return "\n".join(lines)
    emit(r, as_json, text)
