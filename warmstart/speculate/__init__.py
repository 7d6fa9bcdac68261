"""Apps never recorded: a sandboxed speculative copy, ld.so pre-resolution and an online
pattern prefetcher, run alongside the first (cold) launch. See docs/speculation.md.

    from warmstart.speculate.fallback import run_fallback_launch
    r = run_fallback_launch(["python3", "-c", "import json"], mechanism="both")
    r.launch_time_s, r.accuracy, r.waste

Nothing is imported here: importing one module does not load the rest.
"""
