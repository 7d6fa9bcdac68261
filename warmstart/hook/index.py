"""The hook index file: the only thing warmstartd and the preload shim read on the exec path.

Layout (mirrors launchd-hook/index.h; little-endian): a 64-byte header (magic, version, entry
count, string-table length, max hold, FNV-1a 64 checksum of the rest), 88-byte entries sorted by
(dev, ino) with argv-signature entries before exe-only ones, then NUL-terminated strings.
Written atomically (temp file + rename) because the daemon reloads on the rename.
"""

import os
import struct
from dataclasses import dataclass, field
from typing import List, Optional, Sequence

from ..errors import WarmstartError

MAGIC = b"WSHOOKIX"
VERSION = 1
HOLD_CAP_MS = 60000         # the daemon never holds an exec longer, whatever the index or config says
ENTRY_STALE = 0x1
ENTRY_LAUNCHER = 0x2        # the wrapper (env/chroot) the app is launched through, not the app itself

_HEADER = struct.Struct("<8sIIIIQI28x")
_ENTRY = struct.Struct("<QQQqQ12I")
assert _HEADER.size == 64 and _ENTRY.size == 88


@dataclass
class IndexEntry:
    """One hooked launch: the executable's identity, its argv signature, what to replay."""
    dev: int
    ino: int
    size: int
    mtime_ns: int
    schedule_id: int
    exe: bytes                              # resolved path: its mount gets the fanotify mark
    schedule: bytes                         # file handed to the replayer
    name: str = ""
    needles: Sequence[bytes] = ()           # argv must contain these, in order (empty: exe only)
    files: Sequence[bytes] = ()             # files the schedule reads, watched for staleness
    hold_ms: int = 1000
    stale: bool = False
    launcher: bool = False                  # see ENTRY_LAUNCHER


@dataclass
class Index:
    entries: List[IndexEntry] = field(default_factory=list)
    max_hold_ms: int = 10000


def fnv1a64(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def _sort_key(e: IndexEntry):
    # same order the C binary search assumes; specific (argv) entries are tried first
    return (e.dev, e.ino, 0 if e.needles else 1, e.schedule_id)


def encode(index: Index) -> bytes:
    strtab = bytearray(b"\0")
    interned = {b"": 0}

    def put(s: bytes):
        if s not in interned:
            interned[s] = len(strtab)
            strtab.extend(s + b"\0")
        return interned[s], len(s)

    def put_list(items: Sequence[bytes]):
        for item in items:
            if not item or b"\0" in item:
                raise WarmstartError(f"cannot index argument or path {item!r}: empty or contains NUL")
        return put(b"\0".join(items))

    body = bytearray()
    entries = sorted(index.entries, key=_sort_key)
    for e in entries:
        for path in (e.exe, e.schedule):
            if not path.startswith(b"/") or b"\0" in path:
                raise WarmstartError(f"index paths must be absolute without NUL: {path!r}")
        hold = max(1, min(int(e.hold_ms), HOLD_CAP_MS))
        fields = (*put(e.exe), *put_list(e.needles), *put(e.schedule), *put(e.name.encode()),
                  *put_list(e.files), hold, (ENTRY_STALE if e.stale else 0) | (ENTRY_LAUNCHER if e.launcher else 0))
        body += _ENTRY.pack(e.dev, e.ino, e.size, e.mtime_ns, e.schedule_id, *fields)
    body += strtab
    header = _HEADER.pack(MAGIC, VERSION, len(entries), len(strtab),
                          max(1, min(int(index.max_hold_ms), HOLD_CAP_MS)), fnv1a64(bytes(body)), 0)
    return header + bytes(body)


def decode(data: bytes, source: str = "index") -> Index:
    """Parse and verify an index (the same checks the daemon makes)."""
    if len(data) < _HEADER.size:
        raise WarmstartError(f"{source}: too short to be a hook index; rewrite it with `warmstart hook install`")
    magic, version, n, strtab_len, max_hold, checksum, _flags = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise WarmstartError(f"{source}: not a warmstart hook index (bad magic); rewrite it with `warmstart hook install`")
    if version != VERSION:
        raise WarmstartError(f"{source}: index version {version}, this warmstart reads {VERSION}; "
                             f"rewrite it with `warmstart hook install`")
    if len(data) != _HEADER.size + n * _ENTRY.size + strtab_len:
        raise WarmstartError(f"{source}: truncated or padded; rewrite it with `warmstart hook install`")
    if fnv1a64(data[_HEADER.size:]) != checksum:
        raise WarmstartError(f"{source}: checksum mismatch (corrupt); rewrite it with `warmstart hook install`")
    strtab = data[_HEADER.size + n * _ENTRY.size:]

    def get(off, length):
        return strtab[off:off + length]

    out = Index(max_hold_ms=max_hold)
    for i in range(n):
        v = _ENTRY.unpack_from(data, _HEADER.size + i * _ENTRY.size)
        dev, ino, size, mtime_ns, sid = v[:5]
        (exe_o, exe_l, argv_o, argv_l, sch_o, sch_l, name_o, name_l, files_o, files_l, hold, flags) = v[5:]
        needles = get(argv_o, argv_l)
        files = get(files_o, files_l)
        out.entries.append(IndexEntry(
            dev=dev, ino=ino, size=size, mtime_ns=mtime_ns, schedule_id=sid, exe=get(exe_o, exe_l),
            schedule=get(sch_o, sch_l), name=get(name_o, name_l).decode(errors="replace"),
            needles=tuple(needles.split(b"\0")) if needles else (),
            files=tuple(files.split(b"\0")) if files else (), hold_ms=hold, stale=bool(flags & ENTRY_STALE),
            launcher=bool(flags & ENTRY_LAUNCHER)))
    return out


def write_index(path: bytes, index: Index, owner_root: Optional[bool] = None) -> None:
    """Atomically replace `path` with the encoded index, mode 0644 (root-owned when run as root)."""
    data = encode(index)
    directory = os.path.dirname(path) or b"."
    try:
        os.makedirs(directory, mode=0o755, exist_ok=True)
        tmp = path + b".tmp.%d" % os.getpid()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            os.fchmod(fd, 0o644)  # the umask must not make it group-writable: the daemon would refuse it
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, path)
    except OSError as e:
        raise WarmstartError(f"cannot write the hook index {os.fsdecode(path)}: {e.strerror}; "
                             f"run as root or pass --index PATH")


def read_index(path: bytes, require_root: bool = True) -> Index:
    """Read and verify an index; with require_root, refuse one the daemon would refuse."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        raise WarmstartError(f"cannot open hook index {os.fsdecode(path)}: {e.strerror}; "
                             f"create it with `warmstart hook install`")
    try:
        st = os.fstat(fd)
        if require_root and (st.st_uid != 0 or st.st_mode & 0o022):
            raise WarmstartError(f"hook index {os.fsdecode(path)} is not owned by root or is writable by "
                                 f"others; warmstartd refuses it: rewrite it as root with `warmstart hook install`")
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read()
    finally:
        os.close(fd)
    return decode(data, os.fsdecode(path))
