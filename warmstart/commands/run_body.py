"""What `warmstart run` does once its options are parsed, and their defaults.

No click here: main.py calls execute() directly for a plain `warmstart run -- CMD`, which is part
of an app's launch and must not pay for loading the whole CLI; commands/run.py parses the full
option set and calls the same function.
"""

import json
import os
import sys

from ..errors import WarmstartError

MODES = ("segmented", "reorder", "interleave", "none")
DEFAULT_MODE = "segmented"
DEFAULT_UNTIL = "exit"
DEFAULT_TIMEOUT_S = 120.0


def _say(line: str) -> None:
    sys.stderr.write(f"warmstart: {line}\n")


def execute(conn, cmd, *, mode=DEFAULT_MODE, cold=False, until_spec=DEFAULT_UNTIL, name=None,
            engine=None, timeout=DEFAULT_TIMEOUT_S, measure_use=False, as_json=False, fs_metadata=True) -> int:
    """Launch cmd with its schedule prefetched, print the summary; the exit status to leave with
    (cmd's own, or 128 + signal). conn: an open database, or a callable that opens it."""
    from ..launching import parse_until
    from ..replay.process import DEFAULT_ENGINE
    from ..replay.runner import LaunchOptions, Prefetch, StoreAs, run_launch
    until = parse_until(until_spec)
    drop = None
    if cold:
        from ..recorder.coldcache import drop_caches as drop
        if os.geteuid() != 0:
            raise WarmstartError("--cold drops the page cache, which needs root: run it with sudo "
                                 "(or launch without --cold)")
        mode = "none"
    out = run_launch(conn() if callable(conn) else conn, list(cmd),
                     Prefetch(mode, engine or DEFAULT_ENGINE, measure_use=measure_use, fs_metadata=fs_metadata),
                     LaunchOptions(until, timeout, passthrough=not as_json, kill_at_end=False),
                     StoreAs(mode="cold" if cold else None), name=name, cold=drop)
    if as_json:
        sys.stdout.write(json.dumps(out.to_json(), indent=2, sort_keys=True, default=str) + "\n")
    else:
        for note in out.notes:
            _say(note)
        st = out.replay_stats or {}
        fetched = st.get("bytes_fetched", 0) / 2**20
        _say(f"{out.app_name or '(unknown app)'} mode={'cold' if cold else mode} launch {out.launch_time_s:.3f} s "
             f"(pre-buffer {out.prebuffer_s:.3f} s, app {out.app_time_s:.3f} s, "
             f"fetched {fetched:.1f} MiB, end: {out.end_reason})")
        if out.page_use:
            pu = out.page_use
            pct = lambda x: "-" if x is None else f"{100 * x:.0f}%"  # noqa: E731
            _say(f"used {pu['used_bytes'] / 2**20:.1f} MiB of file pages, prefetched "
                 f"{pu['prefetched_bytes'] / 2**20:.1f} MiB: accuracy {pct(pu['accuracy'])}, "
                 f"waste {pct(pu['waste'])}")
    status = out.exit_status
    if status is None:
        return 0
    return 128 + (-status) if status < 0 else status
