"""The aged system image: the files of python3, gcc, node, perl, git and vim (and filler), as years
of installs.

Two layouts (LAYOUTS), so a result is not one disk's accident:
- packaged: files written package by package (dpkg's file lists say who owns what), the packages
  in a shuffled order with a fixed seed, so a program's files end up spread over the disk the
  way they are on a long-lived system disk; the image is a tenth of the modelled drive.
- random: the directories first, then every file (and byte-code cache) of every package in one
  random order with a fixed seed, in an image RANDOM_SPACE times the data: a disk aged until
  nothing of a package is together, used at full stroke (the image is the whole drive).
Each layout in each file system of emudisk.image.MKFS (ext4, XFS, btrfs): the file list and its
order are made once, here, whatever the file system, so the images differ only in how each file
system places the same files written in the same order.
Built on a plain loop device (no disk model, fast), then cached in /var/cache/warmstart/images
keyed by the package set, layout, file system, size, seed and format version.
"""

import hashlib
import importlib.util
import json
import os
import random
import stat
import tempfile
from pathlib import Path
from typing import Callable, List, Optional

from ..errors import WarmstartError
from . import image as images, packages, sysops

FORMAT_VERSION = 3   # 2: mtimes kept, byte-code caches copied; 3: dpkg alternatives (vim, ...)
SEED = 20150601
LAYOUTS = ("packaged", "random")
RANDOM_SPACE = 4     # random layout: image size / data size (free space spreads the block groups)
# What must run in the image: python3 (Debian's 3.11), `gcc -c` and node, with all they depend on,
# and the basic commands (ls, cat, ...) that `bench --app` and the tests run in it. coreutils was
# in the image only when the seeded filler happened to pick it, which depends on what else the
# host has installed: installing chromium for the browser test made it drop out.
ROOTS = ["python3", "python3.11", "libpython3.11-stdlib", "gcc", "gcc-12", "cpp", "binutils",
         "libc6-dev", "nodejs", "coreutils", "libc-bin",   # libc-bin: the C.utf8 locale perl wants
         # the bench's perl (with modules from CPAN), git and vim apps
         "perl", "libjson-perl", "libalgorithm-diff-perl", "libdpkg-perl", "git", "vim", "vim-runtime"]
# Other installed packages' files mixed in, so the launch files are not packed together.
FILLER_MB = 150
CACHE_DIR = Path(os.environ.get("WARMSTART_IMAGE_CACHE", "/var/cache/warmstart/images"))
# Directories a chroot needs that no package ships.
BASE_DIRS = [b"/proc", b"/dev", b"/tmp", b"/etc", b"/root", b"/run", b"/var/tmp"]

Progress = Optional[Callable[[str], None]]


def plan(size_mb: int, layout: str = "packaged", fs: str = "ext4"):
    """(packages in write order, image size in MiB, cache key) for this machine."""
    if layout not in LAYOUTS:
        raise WarmstartError(f"unknown layout {layout!r}: use one of {', '.join(LAYOUTS)}")
    if fs not in images.FILE_SYSTEMS:
        raise WarmstartError(f"unknown file system {fs!r}: use one of {', '.join(images.FILE_SYSTEMS)}")
    pkgs = packages.installed()
    absent = packages.missing(ROOTS, pkgs)
    if absent:
        raise WarmstartError(f"the system image needs installed packages {', '.join(absent)}: "
                             f"apt-get install {' '.join(absent)}")
    needed = packages.closure(ROOTS, pkgs)
    rng = random.Random(SEED)
    others = sorted(set(pkgs) - set(needed))
    rng.shuffle(others)
    filler, kb = [], 0
    for name in others:
        if kb >= FILLER_MB * 1024:
            break
        if pkgs[name].installed_kb <= 20 * 1024:   # no giant packages: many small installs
            filler.append(name)
            kb += pkgs[name].installed_kb
    order = sorted(needed + filler)
    rng.shuffle(order)
    data_kb = sum(pkgs[n].installed_kb for n in order)
    # Room for metadata and small-file slack, plus free space as on a used system. The same size
    # in every file system, so a seek spans the same fraction of the stroke in each.
    size = max(size_mb, int(data_kb / 1024 * (1.4 if layout == "packaged" else RANDOM_SPACE)) + 128)
    key_src = json.dumps({"v": FORMAT_VERSION, "seed": SEED, "filler": FILLER_MB, "size": size,
                          **({} if layout == "packaged" else {"layout": layout}),
                          **({} if fs == "ext4" else {"fs": fs}),   # ext4's keys as before
                          "pkgs": [(n, pkgs[n].version) for n in order]}, sort_keys=True)
    key = hashlib.sha256(key_src.encode()).hexdigest()[:16]
    return [pkgs[n] for n in order], size, key


def cached_image(size_mb: int = 512, progress: Progress = None, layout: str = "packaged",
                 fs: str = "ext4") -> Path:
    """Path of the cached system image in file system fs (building it first if needed). Its size
    is at least size_mb, more if the files need it."""
    order, size, key = plan(size_mb, layout, fs)
    path = CACHE_DIR / (f"system-{key}.img" if fs == "ext4" else f"system-{fs}-{key}.img")
    if path.exists():
        return path
    if progress:
        progress(f"building the {layout} system image in {fs} ({len(order)} packages, {size} MiB) "
                 f"into {path} (once; a minute or more) ...")
    build(order, size, path, layout, fs, progress)
    return path


class _Ticker:
    """Tells progress how far writing the files is, every tenth of the way."""

    def __init__(self, progress: Progress, total: int, what: str):
        self.progress, self.total, self.what, self.done, self.shown = progress, max(total, 1), what, 0, 0

    def step(self) -> None:
        self.done += 1
        tenth = self.done * 10 // self.total
        if self.progress and tenth > self.shown:
            self.shown = tenth
            self.progress(f"  {self.what}: {10 * tenth}% ({self.done}/{self.total})")


def _write_packaged(root: bytes, order: List[packages.Package], progress: Progress = None) -> None:
    tick = _Ticker(progress, len(order), "packages written")
    for pkg in order:
        tick.step()
        paths = packages.file_list(pkg)
        for path in paths:
            _copy_entry(root, path)
        # As py3compile in the package's postinst: its byte-code lands right after it.
        # Without it every launch compiles and writes .pyc files, so no two launches agree.
        for path in paths:
            if path.endswith(b".py"):
                _copy_bytecode(root, path)


def _write_random(root: bytes, order: List[packages.Package], progress: Progress = None) -> None:
    """Every directory first (in package order: a parent before its children), then all files,
    symlinks and byte-code caches of all packages in one seeded random order."""
    entries = []
    for pkg in order:
        for path in packages.file_list(pkg):
            try:
                is_dir = stat.S_ISDIR(os.lstat(path).st_mode)
            except OSError:
                continue
            if is_dir:
                _copy_entry(root, path)
            else:
                entries.append((path, False))
                if path.endswith(b".py"):
                    entries.append((path, True))
    random.Random(SEED + 1).shuffle(entries)
    tick = _Ticker(progress, len(entries), "files written")
    for path, bytecode in entries:
        tick.step()
        (_copy_bytecode if bytecode else _copy_entry)(root, path)


def build(order: List[packages.Package], size_mb: int, dest: Path, layout: str = "packaged",
          fs: str = "ext4", progress: Progress = None) -> None:
    """Write the packages' files in order into a fresh file system fs, then store it at dest."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    mem = images.tmpfs_dir()
    mem.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="build-", dir=mem))
    img, mnt, loop = work / "system.img", work / "mnt", None
    tmp = dest.with_name(f"{dest.name}.{os.getpid()}.part")
    try:
        images.make_empty(img, size_mb, label="warmstart-sys", fs=fs)
        loop = sysops.loop_attach(img, direct_io=False)
        mnt.mkdir()
        images.mount(fs, loop, mnt)
        root = os.fsencode(str(mnt))
        _base_layout(root)
        (_write_packaged if layout == "packaged" else _write_random)(root, order, progress)
        _write_alternatives(root)
        sysops.unmount(root)
        sysops.loop_detach(loop)
        loop = None
        sysops.run(["cp", "--sparse=always", str(img), str(tmp)], fix=f"free space in {dest.parent}")
        os.replace(tmp, dest)       # atomic: a concurrent build of the same key is harmless
    finally:
        sysops.unmount_all_under(mnt)
        if loop:
            sysops.loop_detach(loop)
        images.remove(img)
        images.remove(tmp)
        for d in (mnt, work):
            try:
                d.rmdir()
            except OSError:
                pass


ALTERNATIVES_DB = b"/var/lib/dpkg/alternatives"


def _write_alternatives(root: bytes) -> None:
    """The links update-alternatives made in postinst scripts (/usr/bin/vim -> /etc/alternatives/vim
    -> /usr/bin/vim.basic): dpkg's file lists do not have them. Each link as on the host, when the
    alternative it points to is in the image."""
    try:
        names = sorted(os.listdir(ALTERNATIVES_DB))
    except OSError:
        return
    os.makedirs(root + b"/etc/alternatives", exist_ok=True)
    for name in names:
        try:
            with open(ALTERNATIVES_DB + b"/" + name, "rb") as f:
                lines = f.read().split(b"\n")
        except OSError:
            continue
        # mode, master link, then (slave name, slave link) pairs up to an empty line
        links = [(name, lines[1])] if len(lines) > 1 else []
        i = 2
        while i + 1 < len(lines) and lines[i]:
            links.append((lines[i], lines[i + 1]))
            i += 2
        for alt, link in links:
            host_alt = b"/etc/alternatives/" + alt
            try:
                target = os.readlink(host_alt)
            except OSError:
                continue
            in_image = _resolve(root, target)
            if in_image is None or not os.path.lexists(in_image) or not os.path.islink(link):
                continue
            for path, points_to in ((host_alt, target), (link, os.readlink(link))):
                dst = _resolve(root, path)
                if dst is not None and not os.path.lexists(dst):
                    os.symlink(points_to, dst)


def _base_layout(root: bytes) -> None:
    """The merged-/usr symlinks (/bin -> usr/bin ...) as on this host, and empty system dirs."""
    for top in (b"usr", b"usr/bin", b"usr/sbin", b"usr/lib", b"usr/lib64"):
        os.makedirs(root + b"/" + top, exist_ok=True)
    for name in (b"bin", b"sbin", b"lib", b"lib64", b"lib32", b"libx32"):
        host = b"/" + name
        if os.path.islink(host):
            os.symlink(os.readlink(host), root + host)
    for d in BASE_DIRS:
        os.makedirs(root + d, exist_ok=True)
    os.chmod(root + b"/tmp", 0o1777)


def _resolve(root: bytes, path: bytes) -> Optional[bytes]:
    """path's real location inside root, following symlinks as a chroot would (absolute targets
    stay inside root), or None if a component is missing. The last component is not followed."""
    parts = [p for p in path.split(b"/") if p]
    if not parts:
        return root
    last, todo, cur, hops = parts[-1], parts[:-1], [], 0
    while todo:
        c = todo.pop(0)
        if c == b".":
            continue
        if c == b"..":
            cur = cur[:-1]
            continue
        real = root + b"/" + b"/".join(cur + [c])
        try:
            st = os.lstat(real)
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(st.st_mode):
            hops += 1
            if hops > 40:
                return None
            target = os.readlink(real)
            if target.startswith(b"/"):
                cur = []
            todo = [p for p in target.split(b"/") if p] + todo
        elif stat.S_ISDIR(st.st_mode):
            cur.append(c)
        else:
            return None
    return root + b"/" + b"/".join(cur + [last])


def _copy_entry(root: bytes, path: bytes) -> None:
    """Copy one dpkg-listed path from the host into the image; missing or odd entries are skipped
    (conffiles removed by the admin, diverted files)."""
    try:
        st = os.lstat(path)
    except OSError:
        return
    dst = _resolve(root, path)
    if dst is None or os.path.lexists(dst):
        return
    if stat.S_ISDIR(st.st_mode):
        os.mkdir(dst, stat.S_IMODE(st.st_mode))
    elif stat.S_ISLNK(st.st_mode):
        os.symlink(os.readlink(path), dst)
    elif stat.S_ISREG(st.st_mode):
        try:
            src = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            return
        try:
            out = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            try:
                while os.sendfile(out, src, None, 1 << 24) > 0:
                    pass
                os.fchmod(out, stat.S_IMODE(st.st_mode))
                # dpkg keeps the packaged mtime; .pyc files are valid only against it.
                os.utime(out, ns=(st.st_atime_ns, st.st_mtime_ns))
            finally:
                os.close(out)
        finally:
            os.close(src)


def _copy_bytecode(root: bytes, source: bytes) -> None:
    """Copy the host's compiled byte-code of one packaged .py file, if it has one."""
    cached = os.fsencode(importlib.util.cache_from_source(os.fsdecode(source)))
    if not os.path.isfile(cached):
        return
    cache_dir = os.path.dirname(cached)
    dst_dir = _resolve(root, cache_dir)
    if dst_dir is None:
        return
    if not os.path.isdir(dst_dir):
        parent = _resolve(root, os.path.dirname(cache_dir))
        if parent is None or not os.path.isdir(parent):
            return
        os.mkdir(dst_dir, 0o755)
    _copy_entry(root, cached)
