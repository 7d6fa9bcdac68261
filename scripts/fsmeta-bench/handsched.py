"""A schedule of every file under a tree (whole files, one pre-buffer segment, in FIEMAP order),
saved as APP's active schedule: for file systems whose recordings this branch cannot map yet."""
import os, sys
from warmstart.db.connection import open_db as connect
from warmstart.db.schedules import save_schedule
from warmstart.fiemap import mapped_extents
from warmstart.model import Range, Schedule, ScheduledFile, Segment
db, app, root = sys.argv[1:4]
files, ranges = [], []
for d, _, names in os.walk(root):
    for n in names:
        p = os.path.join(d, n).encode()
        st = os.stat(p)
        if len(sys.argv) > 4 and st.st_ino % 2:
            continue      # only the files statread reads
        f = ScheduledFile(p, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        exts = mapped_extents(p)
        files.append(f)
        sector = exts[0].physical // 512 if exts else 0
        ranges.append(Range(st.st_dev, sector, (st.st_size + 511) // 512, st.st_size, f, 0, len(ranges) + 1))
ranges.sort(key=lambda r: r.sector)
seg = Segment(1, 1, len(ranges), 0.0, 0.0, sum(r.length for r in ranges), ranges)
conn = connect(db)
sid = save_schedule(conn, Schedule(None, app, "reorder", "model", 0.0, seg.bytes, 0, [], [seg], files, {}))
print("schedule", sid, len(files), "files", seg.bytes, "bytes")
