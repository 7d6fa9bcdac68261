"""Replay: turn a stored schedule into page-cache contents before and during a launch.

export.py   writes the checked export (.wsr) the C replayer reads
process.py  starts build/warmstart-replay and speaks its notify/stats protocol
runner.py   run_launch(): replayer + app + measurement + the launches row (used by run and bench)
"""
