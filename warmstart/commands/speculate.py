"""`warmstart fallback`: launch an app warmstart never recorded, with speculation and/or the
online prefetcher, and report accuracy and waste."""

import click

from ..cli import emit, json_option
from ..launching import parse_until
from ..speculate.fallback import MECHANISMS, run_fallback_launch
from ..speculate.sandbox import SandboxLimits


def _pct(x):
    return "-" if x is None else f"{100 * x:.1f}%"


@click.command("fallback", context_settings={"ignore_unknown_options": True})
@click.option("--mechanism", type=click.Choice(MECHANISMS), default="both", show_default=True,
              help="spec: ld.so pre-resolution + sandboxed speculative copy; online: pattern "
                   "prefetcher on page-cache misses; both; none: plain launch, measured alike.")
@click.option("--until", "until_spec", default="exit", show_default=True,
              help="Launch end: exit, idle=SECONDS, stdout=REGEX or file=PATH.")
@click.option("--cold", is_flag=True, help="Drop the page cache first (sync; drop_caches, root).")
@click.option("--ra-max", type=int, default=SandboxLimits.ra_max, show_default=True,
              help="Bytes prefetched per file the copy opens.")
@click.option("--budget", type=int, default=SandboxLimits.budget, show_default=True,
              help="Total bytes the copy may prefetch.")
@click.option("--timeout", type=float, default=120.0, show_default=True, help="Give up after SECONDS.")
@json_option
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
def fallback(mechanism, until_spec, cold, ra_max, budget, timeout, as_json, cmd):
    """Launch CMD (never recorded) with speculative and/or online prefetching.

    The speculative copy runs in a sandbox it cannot change anything from and is killed when
    the launch ends. CMD's output is passed through; the summary goes to stdout at the end.

    \b
    Examples:
      warmstart fallback -- python3 -c 'import json, email'
      warmstart fallback --mechanism online --cold --json -- gcc -c hello.c
      warmstart fallback --mechanism spec --until 'stdout=^ready' -- ./server
    """
    until = parse_until(until_spec)
    if cold:
        from ..recorder.coldcache import drop_caches
        drop_caches()
    limits = SandboxLimits(ra_max=ra_max, budget=budget)
    r = run_fallback_launch(list(cmd), mechanism, until, timeout, limits=limits, passthrough=not as_json)
    d = r.as_dict()
    emit(d, as_json, lambda: "\n".join([
        f"mechanism   {r.mechanism}",
        f"launch      {r.launch_time_s:.3f} s ({r.end_reason}, exit status {r.exit_status})",
        f"accuracy    {_pct(r.accuracy)} of {r.used_pages} used pages were prefetched",
        f"waste       {_pct(r.waste)} of {r.prefetched_pages} prefetched pages unused",
    ] + [f"  {k:<11} prefetched {v['prefetched_pages']} pages, {v['prefetched_used_pages']} used"
         for k, v in r.by_mechanism.items() if v["prefetched_pages"]]
      + ([f"copy        {r.copy.get('prefetched_files')} files prefetched; ended: "
          f"{r.copy.get('killed_reason') or 'exited by itself'}"] if r.copy else [])))
