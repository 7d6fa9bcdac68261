"""Static ld.so pre-resolution: the libraries a program will map, found without running it.

Reads the ELF dynamic section (DT_NEEDED, DT_RUNPATH, DT_RPATH; pyelftools), resolves each name the way
ld.so does (RPATH of the loaders when there is no RUNPATH, LD_LIBRARY_PATH, RUNPATH,
/etc/ld.so.cache, the default directories), transitively, inside a root directory (a chroot
image), following symlinks within that root. Reading headers has no side effects and costs a
few small reads of files the launch needs anyway; the result is prefetched before ld.so asks.
"""

import os
import re
import shutil
import struct
import subprocess
from typing import BinaryIO, Dict, List, Optional, Sequence, Tuple

DEFAULT_DIRS = (b"/lib/x86_64-linux-gnu", b"/usr/lib/x86_64-linux-gnu", b"/lib64", b"/usr/lib64",
                b"/lib", b"/usr/lib")
LDCONFIG_LINE = re.compile(rb"^\t(\S+) \(([^)]*)\) => (.+)$", re.M)
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
    """The few ELF facts ld.so needs: interpreter, needed names, run paths (64-bit LE only).
    pyelftools reads only the headers, the dynamic segment and its strings, not the whole file
    (94 MiB for node: docs/speculation.md). Its strings are latin-1 str: back to the bytes."""

    def __init__(self, f: BinaryIO):
        from elftools.common.exceptions import ELFError   # 30 ms: only when a launch is resolved
        from elftools.elf.elffile import ELFFile
        try:
            elf = ELFFile(f)
            if elf.elfclass != 64 or not elf.little_endian:
                raise ValueError("not a 64-bit little-endian ELF file")
            self.interp: Optional[bytes] = None
            self.needed: List[bytes] = []
            self.rpath: List[bytes] = []
            self.runpath: List[bytes] = []
            for seg in elf.iter_segments():
                if seg["p_type"] == "PT_INTERP":
                    if seg["p_filesz"] > os.pathconf("/", "PC_PATH_MAX"):   # no path is longer: not read
                        raise ValueError(f"not a readable ELF file: a PT_INTERP of {seg['p_filesz']} bytes")
                    self.interp = seg.data().split(b"\0", 1)[0]   # bytes: any path, not only UTF-8
                elif seg["p_type"] == "PT_DYNAMIC":
                    for tag in seg.iter_tags():
                        kind = tag.entry.d_tag
                        if kind == "DT_NEEDED":
                            self.needed.append(tag.needed.encode("latin-1"))
                        elif kind == "DT_RPATH":
                            self.rpath += [d.encode("latin-1") for d in tag.rpath.split(":") if d]
                        elif kind == "DT_RUNPATH":
                            self.runpath += [d.encode("latin-1") for d in tag.runpath.split(":") if d]
        except (ELFError, OverflowError) as e:   # OverflowError: an offset past any file
            raise ValueError(f"not a readable ELF file: {e}") from e


def read_ld_cache(cache_file: bytes) -> Dict[bytes, bytes]:
    """ld.so.cache -> {soname: path} of the x86-64 libraries, as glibc's own reader prints it
    (`ldconfig -p`, lines "\tNAME (libc6,x86-64[, ...]) => PATH", as ctypes.util reads them);
    {} without ldconfig or a readable cache (the default directories are still searched)."""
    ldconfig = shutil.which("ldconfig", path="/usr/sbin:/sbin:/usr/bin:/bin")
    if ldconfig is None:
        return {}
    try:
        out = subprocess.run([ldconfig, "-p", "-C", cache_file], capture_output=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    found: Dict[bytes, bytes] = {}
    for m in LDCONFIG_LINE.finditer(out):
        if m.group(2).split(b",")[:2] == [b"libc6", b"x86-64"]:
            found.setdefault(m.group(1), m.group(3))
    return found


def _origin(dirs: Sequence[bytes], origin: bytes) -> List[bytes]:
    return [d.replace(b"$ORIGIN", origin).replace(b"${ORIGIN}", origin) for d in dirs]


def needed_files(executable: bytes, root: bytes = b"/", env_ld_path: bytes = b"") -> List[bytes]:
    """Paths (inside root) of the executable's interpreter and every library it will load,
    in ld.so's breadth-first load order. Unresolvable names are skipped (ld.so would fail)."""
    cache = read_ld_cache(os.path.join(root, b"etc/ld.so.cache"))
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
                elf = Elf(f)
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
