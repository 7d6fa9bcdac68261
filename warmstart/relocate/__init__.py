"""Relocation: lay the files an app's launch reads out contiguously, in launch order (issue 9).

    from warmstart.relocate import relocate_apps
    report = relocate_apps(conn, ["app1", "app2"], dry_run=True)

Modules: planner (what goes where), checks (what must not move and why), donor (the target
region), moveext (the ext4 ioctl), reanalyze (new LBAs into the schedules), relocate (the
orchestrator). FIEMAP and file placement are warmstart/fiemap.py; the disk time estimate is the
analyzer's (analyzer/access.schedule_cost on the device's stored profile). See docs/relocation.md.
"""

from .relocate import Report, relocate_apps

__all__ = ["Report", "relocate_apps"]
