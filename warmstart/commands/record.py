"""`warmstart record`: record cold launches of a command (parse, call the recorder, print)."""

import os

import click

from ..cli import emit, json_option
from ..db import recordings as store
from ..errors import WarmstartError
from ..launching import parse_until
from ..recorder.coldcache import METHODS
from ..recorder.mapping import describe
from ..recorder.recorder import RecordOptions, record_once


def _device(value: str) -> int:
    """/dev/NAME, MAJOR:MINOR, or a path on the device's file system -> dev_t."""
    if ":" in value and value.replace(":", "").isdigit():
        major, minor = value.split(":")
        return os.makedev(int(major), int(minor))
    try:
        st = os.stat(value)
    except OSError as e:
        raise WarmstartError(f"--device {value}: {e.strerror}; give /dev/NAME, MAJOR:MINOR or a mounted path")
    import stat as st_mod
    return st.st_rdev if st_mod.S_ISBLK(st.st_mode) else st.st_dev


def summary(conn, rid: int) -> dict:
    rec = store.get_recording(conn, rid)
    env = store.recording_env(rec)
    reqs = store.load_block_requests(conn, rid)
    reads = [r for r in reqs if not r.is_write]
    pages = env.get("data_pages") or 0
    return {
        "recording_id": rid, "launch_time_s": rec["launch_time_s"], "end_reason": rec["end_reason"],
        "exit_status": rec["exit_status"], "backend": rec["backend"], "cold_method": rec["cold_method"],
        "requests": len(reqs), "read_requests": len(reads),
        "read_bytes": sum(r.nr_sectors for r in reads) * 512,
        "cpu_total_s": rec["cpu_total_s"], "cpu_in_c_i_s": sum(r.cpu_before_ns for r in reqs) / 1e9,
        "warm_cpu_s": rec["warm_cpu_s"],
        "lost_events": rec["lost_events"], "status": rec["status"],
        "data_pages": pages, "resolved_data_pages_pct":
            round(100.0 * (env.get("resolved_data_pages") or 0) / pages, 1) if pages else None,
        "mapping": env.get("mapping"),
    }


def _text(name, s) -> str:
    lines = [f"recording {s['recording_id']} of {name}: {s['launch_time_s']:.3f} s launch "
             f"(end: {s['end_reason']}), {s['read_requests']} reads ({s['read_bytes'] / 1048576:.1f} MiB), "
             f"{s['requests'] - s['read_requests']} writes, CPU {s['cpu_total_s']:.3f} s",
             f"  cold cache: {s['cold_method']}, backend: {s['backend']}, "
             f"data pages resolved to paths: {s['resolved_data_pages_pct']}% of {s['data_pages']}"]
    describe(s["mapping"], lambda line: lines.append("  " + line))
    if s["lost_events"]:
        lines.append(f"  WARNING: {s['lost_events']} trace events were lost; the recording is marked "
                     f"'lost-events' (record again on a quieter machine or with --buffer-kb larger)")
    return "\n".join(lines)


@click.command("record", context_settings={"ignore_unknown_options": True})
@click.option("--name", help="Name the app is stored under (default: the command's file name).")
@click.option("--runs", default=1, show_default=True, type=click.IntRange(1, 100),
              help="Cold launches to record (the analyzer can merge them).")
@click.option("--until", "until_spec", default="exit", show_default=True,
              help="Launch end: exit | idle=SECONDS | stdout=REGEX | file=PATH.")
@click.option("--timeout", default=60.0, show_default=True, type=click.FloatRange(0.1, 3600),
              help="Seconds to wait for the launch end before giving up (nothing is stored).")
@click.option("--backend", type=click.Choice(["auto", "blktrace", "tracefs"]), default="auto", show_default=True,
              help="Block tracing: blktrace relay files if they work, else tracefs tracepoints.")
@click.option("--cold", type=click.Choice(METHODS), default="drop_caches", show_default=True,
              help="How to make the cache cold: drop the whole page cache, evict only the app's files "
                   "of its previous recording, or nothing.")
@click.option("--device", "devices", multiple=True,
              help="A block device of the launch (/dev/NAME, MAJ:MIN or a path on it); repeatable. "
                   "Watched by --until idle; kernel-thread I/O on it is the launch's.")
@click.option("--allow-failure", is_flag=True,
              help="Store the recording even if the command exits non-zero or crashes.")
@click.option("--buffer-kb", default=8192, show_default=True, type=click.IntRange(64, 1 << 20),
              help="tracefs ring buffer per CPU and instance.")
@click.option("--warm-run/--no-warm-run", default=True, show_default=True,
              help="Launch once more, untraced and warm, to measure the CPU a prefetched launch needs "
                   "(the analyzer calibrates c_i with it). Skip it for commands with side effects.")
@json_option
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_obj
def record(ctx, name, runs, until_spec, timeout, backend, cold, devices, allow_failure, buffer_kb, warm_run,
           as_json, command):
    """Record cold launches of COMMAND: every block request, page-cache add and the CPU time
    between I/O stalls. Needs root. Nothing is stored for a launch that fails, crashes, times
    out or is interrupted (unless --allow-failure).

    \b
    Examples:
      warmstart record --name pyimport -- python3 -c 'import json, email, asyncio'
      warmstart record --runs 3 --until idle=1.0 -- /usr/bin/gimp
      warmstart record --until 'stdout=^ready' --timeout 20 -- ./server --port 8080
      warmstart record --cold=evict --name pyimport -- python3 -c 'import json'
    """
    opts = RecordOptions(until=parse_until(until_spec), timeout=timeout, backend=backend, cold=cold,
                         devices=[_device(d) for d in devices], allow_failure=allow_failure,
                         buffer_kb=buffer_kb, passthrough=not as_json, warm_run=warm_run)
    name = name or os.path.basename(command[0])
    conn = ctx.db

    def say(msg):
        click.echo(f"warmstart: {msg}", err=True)

    done = []
    try:
        with click.progressbar(range(runs), label=f"recording {name}", file=click.get_text_stream("stderr"),
                               show_pos=True) if runs > 1 else _single(runs) as bar:
            for _ in bar:
                done.append(record_once(conn, name, list(command), opts, say))
    except KeyboardInterrupt:
        err = WarmstartError("interrupted; this launch was not stored and tracing was removed"
                             + (f" (recordings {', '.join(map(str, done))} were stored)" if done else ""))
        err.exit_code = 130
        raise err
    except WarmstartError as e:
        if done:
            raise WarmstartError(f"{e} (recordings {', '.join(map(str, done))} of this run were stored)")
        raise
    results = [summary(conn, rid) for rid in done]
    emit({"app": name, "recordings": results}, as_json, lambda: "\n".join(_text(name, s) for s in results))


class _single:
    def __init__(self, n):
        self.n = n

    def __enter__(self):
        return range(self.n)

    def __exit__(self, *exc):
        return False
