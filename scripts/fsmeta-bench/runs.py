"""What the fsmeta-bench scripts that time `warmstart run` share: one launch from a cold cache,
and the medians of the launches of each variant."""

import json
import statistics
import subprocess


def cold_run(emu, ws, argv, *args) -> dict:
    """`warmstart run --json [args] -- argv` (ws: the `python -m warmstart --db DB` words) after
    dropping emu's caches: its JSON document."""
    emu.drop_caches()
    p = subprocess.run(ws + ["run", *args, "--json", "--", *argv], capture_output=True, text=True, check=True)
    return json.loads(p.stdout)


def print_medians(title: str, res) -> None:
    """res: variant label -> rows of numbers; each column's median, per variant."""
    print(f"\nmedians {title}")
    for label, rows in res.items():
        print(f"  {label}: " + " / ".join(f"{statistics.median(col):.3f}" for col in zip(*rows)))
