"""The hook index (hook.idx): written by warmstart/hook/index.py, read by warmstartd and the
preload shim (launchd-hook/index.h includes the generated build/gen/hook_index_layout.h and maps
the file onto its structs).

    header (64 bytes) | entries (96 bytes each, sorted by dev, ino, then argv-signature entries
    before exe-only ones) | string table (each string NUL-terminated)

checksum = FNV-1a 64 over everything after the header. Little-endian.
"""

from . import Field, Format, Record

MAGIC = b"WSHOOKIX"
VERSION = 2                 # 2: entries carry owner_uid
HOLD_CAP_MS = 60000         # the daemon never holds an exec longer, whatever the index or config says
ENTRY_STALE = 0x1           # a scheduled file changed since analysis: do not replay
ENTRY_LAUNCHER = 0x2        # the wrapper (env/chroot) the app is launched through; it has no files
                            # of its own: staleness is that of its schedule id

HEADER = Record("HEADER", 64,
                Field("magic", "8s", "WS_INDEX_MAGIC"),
                Field("version", "I", "WS_INDEX_VERSION"),
                Field("n_entries", "I"),
                Field("strtab_len", "I"),
                Field("max_hold_ms", "I"),
                Field("checksum", "Q", "FNV-1a 64 of everything after the header"),
                Field("flags", "I"),
                Field("reserved", "28x"),
                c_struct="ws_index_header")
ENTRY = Record("ENTRY", 96,
               Field("dev", "Q", "userspace dev_t, makedev(major, minor)"),
               Field("ino", "Q"),
               Field("size", "Q"),
               Field("mtime_ns", "q"),
               Field("schedule_id", "Q"),
               Field("exe_off", "I", "resolved path of the executable"),
               Field("exe_len", "I"),
               Field("argv_off", "I", "NUL-separated needles, argv must contain them in order"),
               Field("argv_len", "I"),
               Field("sched_off", "I", "schedule file handed to the replayer"),
               Field("sched_len", "I"),
               Field("name_off", "I", "app name, for logs"),
               Field("name_len", "I"),
               Field("files_off", "I", "NUL-separated paths the schedule reads (staleness)"),
               Field("files_len", "I"),
               Field("hold_ms", "I", "pre-buffer deadline for this app"),
               Field("flags", "I", "WS_ENTRY_*"),
               Field("owner_uid", "I", "whose launches may use it: 0 (root's recording) any user's, "
                     "otherwise that uid's only (a schedule learned from that user's launch)"),
               Field("reserved", "4x"),
               c_struct="ws_index_entry")

FORMAT = Format("hook_index", "WS_INDEX", __doc__.split("\n\n")[0],
                {"WS_INDEX_MAGIC": MAGIC, "WS_INDEX_VERSION": VERSION,
                 "WS_HOLD_CAP_MS": (HOLD_CAP_MS, "hard deadline: an exec is never held longer (docs/hook.md)"),
                 "WS_ENTRY_STALE": (ENTRY_STALE, "a scheduled file changed since analysis: do not replay"),
                 "WS_ENTRY_LAUNCHER": (ENTRY_LAUNCHER, "the wrapper (env/chroot) the app is launched through")},
                (HEADER, ENTRY))


def fnv1a64(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h
