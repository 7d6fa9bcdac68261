"""Static ld.so pre-resolution: the libraries a program will map, found without running it.

Reads the ELF dynamic section (DT_NEEDED, DT_RUNPATH, DT_RPATH), resolves each name the way
ld.so does (RPATH of the loaders when there is no RUNPATH, LD_LIBRARY_PATH, RUNPATH,
/etc/ld.so.cache, the default directories), transitively, inside a root directory (a chroot
image), following symlinks within that root. Reading headers has no side effects and costs a
few small reads of files the launch needs anyway; the result is prefetched before ld.so asks.
"""

import os
import struct
from typing import Dict, List, Optional, Sequence, Tuple

PT_LOAD, PT_DYNAMIC, PT_INTERP = 1, 2, 3
DT_NULL, DT_NEEDED, DT_STRTAB, DT_RPATH, DT_RUNPATH = 0, 1, 5, 15, 29
DEFAULT_DIRS = (b"/lib/x86_64-linux-gnu", b"/usr/lib/x86_64-linux-gnu", b"/lib64", b"/usr/lib64",
                b"/lib", b"/usr/lib")
CACHE_MAGIC_NEW = b"glibc-ld.so.cache1.1"
CACHE_MAGIC_OLD = b"ld.so-1.7.0"
MAX_LINKS = 40


def resolve_in_root(root: bytes, path: bytes) -> Optional[bytes]:
    """path (absolute, as seen inside root) -> the host path of the file, symlinks followed
    without leaving root; None if it does not exist."""
    parts = [p for p in path.split(b"/") if p]
    done: List[bytes] = []
    links = 0
    while parts:
        comp = parts.pop(0)
        if comp == b".":
            continue
        if comp == b"..":
            if done:
                done.pop()
            continue
        host = os.path.join(root, *done, comp) if done else os.path.join(root, comp)
        try:
            target = os.readlink(host)
        except FileNotFoundError:
            return None
        except OSError:
            done.append(comp)  # not a symlink
            continue
        links += 1
        if links > MAX_LINKS:
            return None
        if target.startswith(b"/"):
            done = []
        parts = [p for p in target.split(b"/") if p] + parts
    host = os.path.join(root, *done) if done else root
    return host if os.path.exists(host) else None


class Elf:
    """The few ELF facts ld.so needs: interpreter, needed names, run paths (64-bit LE only)."""

    def __init__(self, data: bytes):
        if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
            raise ValueError("not a 64-bit little-endian ELF file")
        phoff, = struct.unpack_from("<Q", data, 32)
        phentsize, phnum = struct.unpack_from("<HH", data, 54)
        self.interp: Optional[bytes] = None
        loads: List[Tuple[int, int, int]] = []
        dyn: Optional[Tuple[int, int]] = None
        for i in range(phnum):
            p_type, _, p_offset, p_vaddr, _, p_filesz = struct.unpack_from("<IIQQQQ", data, phoff + i * phentsize)
            if p_type == PT_LOAD:
                loads.append((p_vaddr, p_offset, p_filesz))
            elif p_type == PT_DYNAMIC:
                dyn = (p_offset, p_filesz)
            elif p_type == PT_INTERP:
                self.interp = data[p_offset:p_offset + p_filesz].rstrip(b"\0")
        self.needed: List[bytes] = []
        self.rpath: List[bytes] = []
        self.runpath: List[bytes] = []
        if dyn is None:
            return
        entries, strtab = [], None
        for off in range(dyn[0], dyn[0] + dyn[1], 16):
            tag, val = struct.unpack_from("<qQ", data, off)
            if tag == DT_NULL:
                break
            entries.append((tag, val))
            if tag == DT_STRTAB:
                strtab = next((o + val - v for v, o, n in loads if v <= val < v + n), None)
        if strtab is None:
            return

        def s(off):
            return data[strtab + off:data.index(b"\0", strtab + off)]
        for tag, val in entries:
            if tag == DT_NEEDED:
                self.needed.append(s(val))
            elif tag == DT_RPATH:
                self.rpath += [d for d in s(val).split(b":") if d]
            elif tag == DT_RUNPATH:
                self.runpath += [d for d in s(val).split(b":") if d]


def read_ld_cache(data: bytes) -> Dict[bytes, bytes]:
    """/etc/ld.so.cache -> {soname: path} (the new format, alone or after the old one)."""
    start = data.find(CACHE_MAGIC_NEW)
    if start < 0:
        return {}
    nlibs, = struct.unpack_from("<I", data, start + 20)
    out: Dict[bytes, bytes] = {}
    base = start + 48
    for i in range(nlibs):
        flags, key, value = struct.unpack_from("<iII", data, base + i * 24)
        # Offsets are from the start of the new-format header; 64-bit x86 libraries only.
        if flags & 0xff00 not in (0x0300, 0):
            continue
        name = data[start + key:data.index(b"\0", start + key)]
        out.setdefault(name, data[start + value:data.index(b"\0", start + value)])
    return out


def _origin(dirs: Sequence[bytes], origin: bytes) -> List[bytes]:
    return [d.replace(b"$ORIGIN", origin).replace(b"${ORIGIN}", origin) for d in dirs]


def needed_files(executable: bytes, root: bytes = b"/", env_ld_path: bytes = b"") -> List[bytes]:
    """Paths (inside root) of the executable's interpreter and every library it will load,
    in ld.so's breadth-first load order. Unresolvable names are skipped (ld.so would fail)."""
    try:
        with open(os.path.join(root, b"etc/ld.so.cache"), "rb") as f:
            cache = read_ld_cache(f.read())
    except OSError:
        cache = {}
    ld_path = [d for d in env_ld_path.split(b":") if d]
    out: List[bytes] = []
    seen = set()
    queue: List[Tuple[bytes, List[bytes]]] = [(executable, [])]  # (path, RPATHs of the loaders)
    while queue:
        path, loader_rpaths = queue.pop(0)
        host = resolve_in_root(root, path)
        if host is None:
            continue
        real = os.path.realpath(host)
        if real in seen:
            continue
        seen.add(real)
        try:
            with open(host, "rb") as f:
                elf = Elf(f.read())
        except (OSError, ValueError, struct.error):
            continue
        out.append(path)
        ihost = resolve_in_root(root, elf.interp) if elf.interp else None
        if ihost is not None and os.path.realpath(ihost) not in seen:
            seen.add(os.path.realpath(ihost))
            out.append(elf.interp)
        origin = os.path.dirname(path)
        rpaths = _origin(elf.rpath, origin) + loader_rpaths if not elf.runpath else []
        for name in elf.needed:
            found = name if b"/" in name else _search(name, root, rpaths, ld_path,
                                                      _origin(elf.runpath, origin), cache)
            if found is not None:
                queue.append((found, _origin(elf.rpath, origin) + loader_rpaths))
    return out


def _search(name, root, rpaths, ld_path, runpath, cache) -> Optional[bytes]:
    for d in list(rpaths) + ld_path + list(runpath):
        cand = os.path.join(d, name)
        if resolve_in_root(root, cand) is not None:
            return cand
    if name in cache and resolve_in_root(root, cache[name]) is not None:
        return cache[name]
    for d in DEFAULT_DIRS:
        cand = os.path.join(d, name)
        if resolve_in_root(root, cand) is not None:
            return cand
    return None


def which(cmd: bytes, root: bytes, path_var: bytes) -> Optional[bytes]:
    """argv[0] -> its path inside root, as execvp would find it; follows a `#!` interpreter."""
    if b"/" in cmd:
        return cmd
    for d in path_var.split(b":"):
        cand = os.path.join(d or b".", cmd)
        host = resolve_in_root(root, cand)
        if host and os.access(host, os.X_OK) and os.path.isfile(host):
            return cand
    return None


def launch_files(argv: Sequence[bytes], root: bytes = b"/", env: Optional[Dict[bytes, bytes]] = None) -> List[bytes]:
    """All files pre-resolution finds for argv: the executable (or script and its interpreter)
    and its libraries."""
    env = env or {}
    exe = which(argv[0], root, env.get(b"PATH", b"/usr/local/bin:/usr/bin:/bin"))
    if exe is None:
        return []
    host = resolve_in_root(root, exe)
    files: List[bytes] = []
    try:
        with open(host, "rb") as f:
            head = f.read(256)
    except (OSError, TypeError):
        return []
    if head.startswith(b"#!"):
        files.append(exe)
        interp = head[2:].split(b"\n")[0].split()
        if not interp:
            return files
        exe = interp[0]
        if os.path.basename(exe) == b"env" and len(interp) > 1:
            exe = which(interp[1], root, env.get(b"PATH", b"/usr/bin:/bin")) or exe
    return files + needed_files(exe, root, env.get(b"LD_LIBRARY_PATH", b""))
