"""After a move the schedules' LBAs are wrong: give every affected app a schedule with the new ones.

Step 1 (always, here): remap. Each file range is placed where the file's bytes are now
(fiemap.Placement), split where the file is no longer contiguous, and each segment put in fetch
order again; segments, metadata ranges and CPU times are kept, t_disk_s and t_exp_s are
re-modelled on the device's stored profile (analyzer/access.remodel). The result is saved
as the app's new active schedule (params.remapped_from = the old id), so `run` and `bench` fetch
in the new order at once.

Step 2: the analyzer (`warmstart.analyzer.analyze.analyze`) is run on the app's
recordings. It maps every recorded access through the FIEMAP the recorder took (where the launch
found the bytes) and places the pieces where they are now, so it re-segments on the new layout
(shorter t_i: fewer, longer segments); its schedule replaces the remapped one. If it cannot run (no recordings, no device profile and no
O_DIRECT probes, ...), the remapped schedule stays active and the report says why.
"""

import dataclasses
from typing import List, Optional

from ..analyzer.access import remodel
from ..analyzer.ordering import fetch_order
from ..db.recordings import recorded_extents_complete
from ..db.schedules import activate_schedule, load_active_schedule, save_schedule
from ..fiemap import Placement
from ..model import Schedule, ScheduledFile


def remap_schedule(conn, sched: Schedule, files: Placement) -> Schedule:
    """A copy of sched with every file range at its current place (split where the file is no
    longer contiguous), segments in fetch order, t_i and t_exp re-modelled."""
    new_files, by_old = [], {}
    for f in sched.files:
        st, _ = files.get(f.path)
        nf = f if st is None or st.st_ino != f.ino else ScheduledFile(
            f.path, f.dev, f.ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        new_files.append(nf)
        by_old[f] = nf
    segments = []
    for seg in sched.segments:
        ranges = []
        for r in seg.ranges:
            runs = files.locate(r)
            if runs is None:   # a device range, or a file that is gone: where it was
                ranges.append(dataclasses.replace(r, file=by_old.get(r.file)))
                continue
            # replace() keeps any other fields a Range has (e.g. its position in the launch).
            ranges += [dataclasses.replace(r, sector=run.sector, nr_sectors=run.nr_sectors, length=run.length,
                                           file=by_old[r.file], file_offset=run.file_offset) for run in runs]
        segments.append(dataclasses.replace(seg, ranges=fetch_order(ranges, sched.params.get("metadata_first", True))))
    extents = {i: files.get(f.path)[1] for i, f in enumerate(new_files)}
    new = dataclasses.replace(sched, id=None, files=new_files, segments=segments, extents=extents,
                              created_at=0.0, stale=False,
                              params=dict(sched.params, remapped_from=sched.id))
    new.params["cost_model"] = remodel(conn, new)
    return new


def reanalyze(conn, app_names, files: Optional[Placement] = None) -> List[dict]:
    """Remap (and, if the analyzer provides it, re-segment) the active schedule of each app.
    files: where the files are now (a Placement taken after the last move), or read afresh."""
    files = Placement() if files is None else files
    out = []
    for name in app_names:
        old = load_active_schedule(conn, name)
        if old is None:
            continue
        new = remap_schedule(conn, old, files)
        sid = save_schedule(conn, new)
        entry = {"app": name, "old_schedule": old.id, "remapped_schedule": sid,
                 "analyzer": _run_analyzer(conn, name, old)}
        entry["analyzer"] += _keep_remap_if_unmapped(conn, name, new, sid)
        out.append(entry)
    return out


def _file_bytes(s: Schedule) -> int:
    return sum(r.length for seg in s.segments for r in seg.ranges if r.file is not None)


def _keep_remap_if_unmapped(conn, name: str, remapped: Schedule, remapped_id: int) -> str:
    """Recordings made before the recorder stored each file's extents are mapped through the files'
    FIEMAP now; data that moved is no longer at its recorded LBA, so it comes out as raw device
    ranges at the old (freed) places (measured: 0 of 21 MiB file bytes for python after a move).
    Keep the remapped schedule active when the analyzer's maps fewer file bytes (measured: losing
    the 3 MiB of another app's moved shared files made node's launch 1.9x slower)."""
    active = load_active_schedule(conn, name)
    if active is None or active.id == remapped_id or _recorded_extents(conn, name):
        return ""
    got, want = _file_bytes(active), _file_bytes(remapped)
    if got >= want:
        return ""
    activate_schedule(conn, name, remapped_id)
    return (f"; its schedule {active.id} maps only {got / 2**20:.1f} of {want / 2**20:.1f} MiB to files (the recorded "
            f"LBAs predate the move): the remapped schedule {remapped_id} stays active")


def _recorded_extents(conn, name: str) -> bool:
    """Do all of the app's recordings carry their files' extents (so the re-run maps moved data)?
    Their file bytes may then legitimately differ from the remap's (other gaps merged)."""
    return recorded_extents_complete(conn, name)


def _run_analyzer(conn, name: str, old: Schedule) -> str:
    """Re-run the analyzer with the options the old schedule was made with; say what happened."""
    from ..analyzer.analyze import ALGORITHMS, PROBES, Options, analyze
    from ..errors import WarmstartError
    opts = Options(probe=old.probe if old.probe in PROBES else "auto",
                   algorithm=old.algorithm if old.algorithm in ALGORITHMS else "optimal")
    try:
        result = analyze(conn, name, opts)
    except WarmstartError as e:
        return f"not re-run ({e}); the remapped schedule is active"
    segs = result.get("segments") if isinstance(result, dict) else None
    return "re-segmented" + (f" ({len(segs)} segments)" if isinstance(segs, list) else "")
