"""`warmstart hook install|uninstall|status|refresh`: the automatic launch hook."""

import click

from ..cli import emit, json_option


@click.group()
def hook():
    """Prefetch recorded apps automatically on every plain launch.

    \b
    Examples:
      sudo warmstart hook install            # warmstartd via systemd, or started directly
      warmstart hook install --preload       # per-user LD_PRELOAD shim, no root needed
      sudo warmstart hook install --preload --system   # shim in /etc/ld.so.preload
      warmstart hook status --json
      warmstart hook refresh                 # after `warmstart analyze`: rewrite the index
      sudo warmstart hook uninstall          # stops the daemon, removes unit, index, preload line
    """


@hook.command()
@click.option("--preload", "with_preload", is_flag=True, help="Install the LD_PRELOAD shim instead of the daemon.")
@click.option("--system", "system_preload", is_flag=True, help="With --preload: add it to /etc/ld.so.preload (root).")
@json_option
@click.pass_obj
def install(obj, with_preload, system_preload, as_json):
    """Write the hook index and start warmstartd (or install the preload shim).

    \b
    Examples:
      sudo warmstart hook install
      warmstart hook install --preload && . ~/.local/share/warmstart/preload.env
    """
    from ..hook.manage import install as do_install
    r = do_install(obj.db, with_preload, system_preload)

    def text():
        lines = [f"index {r['index']}: {len(r['entries'])} app(s) hooked"]
        lines += [f"  {e['app']} (schedule {e['schedule_id']}, hold <= {e['hold_ms']} ms)" for e in r["entries"]]
        lines += [f"  skipped {s['app']}: {s['reason']}" for s in r["skipped"]]
        if "daemon" in r:
            lines.append(f"warmstartd pid {r['daemon']['pid']}: {r['daemon']['how']}")
        if "preload" in r:
            p = r["preload"]
            lines.append(f"preload shim ({p['preload']}): {p['file']}" + (f"; {p['next_step']}" if "next_step" in p else ""))
        return "\n".join(lines)
    emit(r, as_json, text)


@hook.command()
@json_option
def uninstall(as_json):
    """Stop warmstartd and remove everything `install` added.

    \b
    Example:
      sudo warmstart hook uninstall
    """
    from ..hook.manage import uninstall as do_uninstall
    r = do_uninstall()
    emit(r, as_json, lambda: ("warmstartd stopped; " if r["daemon_stopped"] else "warmstartd was not running; ")
         + ("removed " + ", ".join(r["removed"]) if r["removed"] else "nothing else to remove"))


@hook.command()
@json_option
@click.pass_obj
def status(obj, as_json):
    """Show whether the hook runs, what it hooks, and its decision times.

    \b
    Example:
      warmstart hook status --json
    """
    from ..hook.manage import status as do_status
    from ..hook.trial import describe
    r = do_status(obj.db)

    def text():
        d = r["daemon"]
        lines = [f"warmstartd: {'running, pid %d' % d['pid'] if d else 'not running'}"
                 + ("" if r["systemd_pid1"] else " (systemd is not PID 1: started directly, not restarted on boot)")]
        if d and d.get("stats"):
            s = d["stats"]
            lines.append(f"  {s['events']} exec events, {s['matched']} hooked; unrelated-exec decision median "
                         f"{s['unrelated_decision_median_us']:.1f} us, p99 {s['unrelated_decision_p99_us']:.1f} us")
        i = r["index"]
        lines.append("index: none" if not i else f"index: {i.get('error') or '%d entries (%s)' % (i['entries'], ', '.join(i['apps']))}")
        lines.append(f"preload shim: {r['preload'] or 'not installed'}")
        if r["launches"]:
            lines.append(f"recent hooked launches: {r['launches']['launches']} {r['launches']['outcomes']}")
        for a in r.get("hooked") or []:
            med = "not timed" if a["median_s"] is None else f"median {a['median_s']:.3f} s"
            cold = "" if a["cold_s"] is None else f", cold {a['cold_s']:.3f} s"
            waited = "" if a.get("waited_median_s") is None else \
                f"; waited on the disk after its release: median {a['waited_median_s'] * 1000:.0f} ms" + \
                (f", mostly in {a['waited_mostly_in']}" if a.get("waited_mostly_in") else "") + \
                ("" if a.get("runq_median_s") is None else f"; for a CPU: median {a['runq_median_s'] * 1000:.0f} ms")
            lines.append(f"hooked: {a['app']}: {a['launches']} launch(es), {med}{cold}{waited}"
                         + (f"; {a['not_timed']} not timed ({a['not_timed_reason']})" if a["not_timed"] else "")
                         + (f"; segmented or whole: {describe(a['trial'])}" if a.get("trial") else ""))
        lines += [f"degraded: {app}: {why}" for app, why in sorted((r.get("degraded") or {}).items())]
        if "system" in r:
            from ..hook.users import render
            lines.append(render(r["system"]))
        return "\n".join(lines)
    emit(r, as_json, text)


@hook.command()
@json_option
@click.pass_obj
def refresh(obj, as_json):
    """Rewrite the index from the database (run after `warmstart analyze`).

    \b
    Example:
      warmstart analyze pyimport --probe hybrid && sudo warmstart hook refresh
    """
    from ..hook.manage import refresh as do_refresh
    r = do_refresh(obj.db)
    emit(r, as_json, lambda: f"index {r['index']}: {len(r['entries'])} app(s); "
         f"{len(r['skipped'])} skipped")


@hook.command()
@json_option
@click.pass_obj
def learner(obj, as_json):
    """Run the hook's learner in the foreground (`hook install` starts it in the background).

    Records unknown apps on their first launch (learn = "auto"), analyzes them when the machine
    is idle, and stores an accuracy record for every hooked launch (docs/hook.md).

    \b
    Example:
      sudo warmstart hook learner      # normally started by `warmstart hook install`
      sudo warmstart hook learner --json   # log one JSON object per line
    """
    import os
    import signal
    import threading
    from ..hook.config import load_config
    from ..hook.layout import hook_paths
    from ..hook import learner as learner_mod
    learner_mod.JSON_LOG = as_json
    paths = hook_paths()
    cfg = load_config(paths.config if paths.config.exists() else None)
    # the path only: a connection kept open here would lose its locks whenever the learner opens
    # another one (see learner._DB_LOCK)
    from ..paths import default_db_path, replace_file
    db_file = os.path.abspath(obj.db_path) if obj.db_path else str(default_db_path())
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    paths.run.mkdir(parents=True, exist_ok=True)  # /run is empty after a reboot
    replace_file(paths.learner_pidfile, f"{os.getpid()}\n".encode(), 0o644)  # started directly or by systemd alike
    try:
        learner_mod.Learner(db_file, paths, cfg).serve(stop)
    finally:
        try:
            if int(paths.learner_pidfile.read_text().split()[0]) == os.getpid():
                paths.learner_pidfile.unlink()
        except (OSError, ValueError, IndexError):
            pass
