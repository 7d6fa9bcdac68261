"""The hook index file: the only thing warmstartd and the preload shim read on the exec path.

The layout is defined once in warmstart/formats/hook_index.py (launchd-hook/index.h includes the
header generated from it): a 64-byte header, 96-byte entries sorted by (dev, ino) with
argv-signature entries before exe-only ones, then NUL-terminated strings. Written atomically
(temp file + rename) because the daemon reloads on the rename.
"""

import os
from dataclasses import dataclass, field
from typing import List, Sequence

from ..errors import WarmstartError
from ..paths import replace_file
from ..formats.hook_index import (ENTRY, ENTRY_LAUNCHER, ENTRY_STALE, HEADER, HOLD_CAP_MS, MAGIC, VERSION,
                                  fnv1a64)

__all__ = ["HOLD_CAP_MS", "Index", "IndexEntry", "decode", "encode", "fnv1a64", "read_index", "write_index"]


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
    owner_uid: int = 0                      # 0: any user's launch; else only that uid's (learned from it)


@dataclass
class Index:
    entries: List[IndexEntry] = field(default_factory=list)
    max_hold_ms: int = 10000


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
        strings = {}
        for field_, (off, length) in (("exe", put(e.exe)), ("argv", put_list(e.needles)), ("sched", put(e.schedule)),
                                      ("name", put(e.name.encode())), ("files", put_list(e.files))):
            strings[field_ + "_off"], strings[field_ + "_len"] = off, length
        body += ENTRY.pack(dev=e.dev, ino=e.ino, size=e.size, mtime_ns=e.mtime_ns, schedule_id=e.schedule_id,
                           **strings, hold_ms=hold,
                           flags=(ENTRY_STALE if e.stale else 0) | (ENTRY_LAUNCHER if e.launcher else 0),
                           owner_uid=e.owner_uid)
    body += strtab
    header = HEADER.pack(magic=MAGIC, version=VERSION, n_entries=len(entries), strtab_len=len(strtab),
                         max_hold_ms=max(1, min(int(index.max_hold_ms), HOLD_CAP_MS)),
                         checksum=fnv1a64(bytes(body)), flags=0)
    return header + bytes(body)


def decode(data: bytes, source: str = "index") -> Index:
    """Parse and verify an index (the same checks the daemon makes)."""
    if len(data) < HEADER.size:
        raise WarmstartError(f"{source}: too short to be a hook index; rewrite it with `warmstart hook install`")
    h = HEADER.unpack(data)
    magic, version, n = h["magic"], h["version"], h["n_entries"]
    if magic != MAGIC:
        raise WarmstartError(f"{source}: not a warmstart hook index (bad magic); rewrite it with `warmstart hook install`")
    if version != VERSION:
        raise WarmstartError(f"{source}: index version {version}, this warmstart reads {VERSION}; "
                             f"rewrite it with `warmstart hook install`")
    if len(data) != HEADER.size + n * ENTRY.size + h["strtab_len"]:
        raise WarmstartError(f"{source}: truncated or padded; rewrite it with `warmstart hook install`")
    if fnv1a64(data[HEADER.size:]) != h["checksum"]:
        raise WarmstartError(f"{source}: checksum mismatch (corrupt); rewrite it with `warmstart hook install`")
    strtab = data[HEADER.size + n * ENTRY.size:]

    def get(off, length):
        return strtab[off:off + length]

    out = Index(max_hold_ms=h["max_hold_ms"])
    for i in range(n):
        v = ENTRY.unpack(data, HEADER.size + i * ENTRY.size)
        needles = get(v["argv_off"], v["argv_len"])
        files = get(v["files_off"], v["files_len"])
        out.entries.append(IndexEntry(
            dev=v["dev"], ino=v["ino"], size=v["size"], mtime_ns=v["mtime_ns"], schedule_id=v["schedule_id"],
            exe=get(v["exe_off"], v["exe_len"]), schedule=get(v["sched_off"], v["sched_len"]),
            name=get(v["name_off"], v["name_len"]).decode(errors="replace"),
            needles=tuple(needles.split(b"\0")) if needles else (),
            files=tuple(files.split(b"\0")) if files else (), hold_ms=v["hold_ms"],
            stale=bool(v["flags"] & ENTRY_STALE), launcher=bool(v["flags"] & ENTRY_LAUNCHER),
            owner_uid=v["owner_uid"]))
    return out


def write_index(path: bytes, index: Index, mode: int = 0o644) -> None:
    """Atomically replace `path` with the encoded index, `mode` (0644: the shim of every user reads
    it; 0600: entries of one user's launches), root-owned when run as root."""
    data = encode(index)
    directory = os.path.dirname(path) or b"."
    try:
        os.makedirs(directory, mode=0o755, exist_ok=True)
        replace_file(path, data, mode)   # a new O_EXCL temp file, never one a user planted
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
