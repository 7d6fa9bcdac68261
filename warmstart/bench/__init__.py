"""warmstart.bench: runs the benchmarks (`warmstart bench`) and stores their launches.

matrix.py runs the round-robin matrix and calls the other modules: apps.py (the app catalogue),
sampler.py (the timeline's samples), hookmode.py (the hook mode), unknown.py (`--unknown`) and
relocation.py (`--relocate`). It records, analyzes and launches through the library calls the
commands make. bench renders through warmstart.report (markdown, stats, summary);
report only reads and renders, and never imports bench.
"""
