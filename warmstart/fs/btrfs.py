"""btrfs: the page-cache events name a file by the file system's anonymous dev (0:N, as in
mountinfo), while stat answers the subvolume's own anonymous dev, and inode numbers restart in
every subvolume. Its data sits on the devices of its device list (BTRFS_IOC_FS_INFO/DEV_INFO),
and FIEMAP answers btrfs *logical* addresses, mapped here to device offsets through the chunk
tree (BTRFS_IOC_TREE_SEARCH on tree 3: each chunk item's stripes give devid and physical offset).

Profiles: single, DUP and RAID1/1C3/1C4 read from the first stripe (a read is served by one
copy; DUP's copies lie on the same device); RAID0 is striped by stripe_len; RAID10/5/6 are not
mapped (their extents are left out, and counted by unmapped_extents). Extents on another device
than data_device() (a multi-device file system) are left out the same way.
metadata: warmed through the file system (FileSystem.metadata "fs"; fs/metadata.py), directories
by lookups only: a directory's index items fill leaves of their own, scattered by copy-on-write,
so reading directories whole cost more than it spared (python on the emulated hdd7200: 333 ms
with its 49 directories read whole, 213 ms with lookups only; FileSystem.list_dirs). The
replayer's step also seeks each range of a file it reads, for the file extent items
(replayer/fsmeta.c), and visits them in the order of the leaves holding their inodes, which
copy-on-write moves (Btrfs.metadata_positions)."""

import bisect
import ctypes
import fcntl
import mmap
import os
import re
import stat
import struct
from functools import cached_property
from typing import Dict, List, NamedTuple, Optional, Tuple

from ..devices import device_node, is_block_device
from ..model import Extent
from .generic import FileSystem

BTRFS_IOC_TREE_SEARCH = 0xD0009411
BTRFS_IOC_INO_LOOKUP = 0xD0009412
BTRFS_IOC_DEV_INFO = 0xD000941E
BTRFS_IOC_FS_INFO = 0x8400941F
FS_INFO_FLAG_METADATA_UUID = 1 << 2
ROOT_TREE, CHUNK_TREE = 1, 3
ROOT_ITEM_KEY = 132
# struct btrfs_root_item: the inode item (160 bytes), generation, root_dirid, then the root
# node's logical address; its level after byte_limit .. drop_progress (struct btrfs_root_item)
_ROOT_BYTENR_AT, _ROOT_LEVEL_AT = 176, 238
FIRST_CHUNK_TREE_OBJECTID = 256
CHUNK_ITEM_KEY = 228
RAID0, RAID1, DUP, RAID10, RAID5, RAID6, RAID1C3, RAID1C4 = 8, 16, 32, 64, 128, 256, 512, 1024
_KEY = struct.Struct("=7Q4I4Q")           # btrfs_ioctl_search_key (104 bytes)
_HDR = struct.Struct("=3Q2I")             # btrfs_ioctl_search_header
_CHUNK = struct.Struct("=4Q3I2H")         # btrfs_chunk without its stripes
_STRIPE = struct.Struct("=2Q16s")         # btrfs_stripe
SEARCH_BUF = 4096 - _KEY.size
# a tree block's header (struct btrfs_header): csum[32] fsid[16] bytenr flags chunk_tree_uuid[16]
# generation owner nritems level; then a leaf's items (struct btrfs_item: key objectid, type,
# offset; data offset, size)
_HEADER = struct.Struct("<32s16sQQ16sQQIB")
_ITEM = struct.Struct("<QBQII")
_KEY_PTR = struct.Struct("<QBQQQ")       # a node's struct btrfs_key_ptr: key, blockptr, generation
INODE_ITEM_KEY = 1
DIR_ITEM_KEY = 84
EXTENT_DATA_KEY = 108
FS_TREE = 5
FIRST_FREE_OBJECTID = 256


# step_order: the files' keys are raised by this where the step is to look up every directory
# first (above any byte offset on a device); a directories-first order is taken only where it
# saves at least this share of the seeks the inode order's pass is predicted to make
DIRS_FIRST = 1 << 56
DIRS_FIRST_SAVES = 0.25
SEEK_WINDOW = 1 << 20     # a read within this far after the previous one is no seek


def _crc32c_table() -> List[int]:
    out = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        out.append(c)
    return out


_CRC32C = _crc32c_table()


def name_hash(name: bytes) -> int:
    """btrfs_name_hash: the offset of a name's DIR_ITEM key (crc32c seeded with ~1, neither end
    inverted)."""
    c = 0xFFFFFFFE
    for b in name:
        c = _CRC32C[(c ^ b) & 0xFF] ^ (c >> 8)
    return c


def predicted_seeks(order: List[Tuple[int, int]], reads: Dict[Tuple[int, int], Tuple[Optional[int], ...]]) -> int:
    """The seeks of a pass of lookups in this order (entries (st_dev, ino)), each reading the
    leaves reads[entry] names (byte offsets, None: not known) that no earlier lookup read: a read
    more than SEEK_WINDOW after the one before it, or before it, counts one."""
    seen, last, seeks = set(), None, 0
    for e in order:
        for leaf in reads.get(e, ()):
            if leaf is None or leaf in seen:
                continue
            seen.add(leaf)
            if last is None or not 0 <= leaf - last < SEEK_WINDOW:
                seeks += 1
            last = leaf
    return seeks


class Chunk(NamedTuple):
    logical: int
    length: int
    stripe_len: int
    type: int
    stripes: Tuple[Tuple[int, int], ...]   # (devid, physical offset)


def _search(fd: int, tree: int, objectid: int, item_type: int):
    """(offset, item bytes) of every item (objectid, item_type, *) of a tree of the btrfs file
    system of fd, in key order (BTRFS_IOC_TREE_SEARCH). Needs CAP_SYS_ADMIN."""
    min_offset = 0
    while True:
        buf = bytearray(4096)
        _KEY.pack_into(buf, 0, tree, objectid, objectid, min_offset, 2 ** 64 - 1, 0, 2 ** 64 - 1,
                       item_type, item_type, 4096, 0, 0, 0, 0, 0)
        fcntl.ioctl(fd, BTRFS_IOC_TREE_SEARCH, buf, True)
        n = _KEY.unpack_from(buf, 0)[9]
        if n == 0:
            return
        pos = _KEY.size
        for _ in range(n):
            _, _, offset, typ, length = _HDR.unpack_from(buf, pos)
            pos += _HDR.size
            if typ == item_type:
                yield offset, bytes(buf[pos:pos + length])
            pos += length
            min_offset = offset + 1
        if min_offset >= 2 ** 64 - 1:
            return


def read_chunks(fd: int) -> List[Chunk]:
    """Every chunk item of the chunk tree of the btrfs file system of fd. Needs CAP_SYS_ADMIN."""
    out: List[Chunk] = []
    for offset, item in _search(fd, CHUNK_TREE, FIRST_CHUNK_TREE_OBJECTID, CHUNK_ITEM_KEY):
        c_len, _, stripe_len, c_type, _, _, _, num_stripes, _ = _CHUNK.unpack_from(item)
        stripes = tuple(_STRIPE.unpack_from(item, _CHUNK.size + i * _STRIPE.size)[:2] for i in range(num_stripes))
        out.append(Chunk(offset, c_len, stripe_len, c_type, stripes))
    return out


def subvolume_id(fd: int) -> int:
    """The tree id of the subvolume holding the open file fd (BTRFS_IOC_INO_LOOKUP; any user)."""
    arg = bytearray(4096)
    struct.pack_into("=QQ", arg, 0, 0, FIRST_FREE_OBJECTID)
    fcntl.ioctl(fd, BTRFS_IOC_INO_LOOKUP, arg, True)
    return struct.unpack_from("=Q", arg, 0)[0]


def tree_root(fd: int, tree: int) -> Optional[Tuple[int, int]]:
    """(logical address, level) of the root node of a tree (a subvolume's id) as committed, or
    None if the root tree has no item for it. Needs CAP_SYS_ADMIN."""
    for _, item in _search(fd, ROOT_TREE, tree, ROOT_ITEM_KEY):
        if len(item) > _ROOT_LEVEL_AT:
            return struct.unpack_from("<Q", item, _ROOT_BYTENR_AT)[0], item[_ROOT_LEVEL_AT]
    return None


def to_physical(chunks: List[Chunk], logical: int) -> Optional[Tuple[int, int, int]]:
    """(devid, physical byte offset, bytes contiguous from there within the chunk's stripe) of a
    logical address; None if no chunk holds it or its profile is not mapped here."""
    lo, hi = 0, len(chunks)
    while lo < hi:
        mid = (lo + hi) // 2
        if chunks[mid].logical <= logical:
            lo = mid + 1
        else:
            hi = mid
    if lo == 0:
        return None
    c = chunks[lo - 1]
    off = logical - c.logical
    if off >= c.length or not c.stripes:
        return None
    if c.type & (RAID10 | RAID5 | RAID6):
        return None
    if c.type & RAID0:
        nr, within = divmod(off, c.stripe_len)
        devid, phys = c.stripes[nr % len(c.stripes)]
        return devid, phys + (nr // len(c.stripes)) * c.stripe_len + within, c.stripe_len - within
    devid, phys = c.stripes[0]          # single, DUP, RAID1*: the first copy
    return devid, phys + off, c.length - off


def translate(chunks: List[Chunk], extents: List[Extent], devid: int) -> Tuple[List[Extent], int]:
    """FIEMAP extents (logical addresses) as extents on device devid, split at chunk/stripe
    boundaries; and the bytes left out (on no mapped chunk, or on another device)."""
    out: List[Extent] = []
    left_out = 0
    for e in extents:
        done = 0
        while done < e.length:
            hit = to_physical(chunks, e.physical + done)
            if hit is None:
                left_out += e.length - done
                break
            dev, phys, span = hit
            n = min(span, e.length - done)
            if dev == devid:
                prev = out[-1] if out else None
                if prev and prev.logical + prev.length == e.logical + done and prev.physical + prev.length == phys:
                    out[-1] = Extent(prev.logical, prev.physical, prev.length + n, prev.flags)
                else:
                    out.append(Extent(e.logical + done, phys, n, e.flags))
            else:
                left_out += n
            done += n
    return out, left_out


def leaves_of(key_ptrs, root: int, level: int, keys: List[Tuple[int, int, int]]) -> Dict[Tuple[int, int, int], int]:
    """key -> logical address of the leaf whose key range holds it (an item with that key, or
    the last item before it: a checksum item covering an address), for each of keys (objectid,
    type, offset), searched down from a tree's root node (logical address, level) as btrfs
    searches: in each node, the last key pointer whose key is at most the one sought.
    key_ptrs(logical, level) answers a node's [(key, child's logical address)] in key order, or
    None if it cannot be read (the keys under it are left out). Each node on the way is read
    once; leaves (level 0) are never read."""
    out: Dict[Tuple[int, int, int], int] = {}
    todo = [(root, level, keys)]
    while todo:
        at, lv, want = todo.pop()
        if lv == 0:
            out.update((k, at) for k in want)
            continue
        ptrs = key_ptrs(at, lv)
        if not ptrs:
            continue
        firsts = [k for k, _ in ptrs]
        under: Dict[int, List[Tuple[int, int, int]]] = {}
        for key in want:
            k = bisect.bisect_right(firsts, key) - 1
            if k >= 0:
                under.setdefault(k, []).append(key)
        todo.extend((ptrs[k][1], lv - 1, g) for k, g in under.items())
    return out


def _subvolume_of(items: List[Tuple[bytes, int]]) -> Optional[int]:
    """The subvolume id of the first of these paths that opens (they share an st_dev: one
    subvolume)."""
    for path, _ in items:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            return subvolume_id(fd)
        except OSError:
            return None
        finally:
            os.close(fd)
    return None


def _syncfs(fd: int) -> None:
    """Commit the file system of fd (syncfs): its trees on disk are then the ones in use."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syncfs(fd) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def device_list(fd: int) -> Dict[int, bytes]:
    """devid -> device path of the btrfs file system of fd (BTRFS_IOC_FS_INFO, DEV_INFO)."""
    info = bytearray(1024)
    fcntl.ioctl(fd, BTRFS_IOC_FS_INFO, info, True)
    max_id = struct.unpack_from("=Q", info, 0)[0]
    out = {}
    for devid in range(1, max_id + 1):
        arg = bytearray(4096)
        struct.pack_into("=Q", arg, 0, devid)
        try:
            fcntl.ioctl(fd, BTRFS_IOC_DEV_INFO, arg, True)
        except OSError:
            continue    # a hole in the devid sequence (a removed device)
        out[devid] = bytes(arg[3072:]).split(b"\0", 1)[0]
    return out


class Btrfs(FileSystem):
    fstypes = ("btrfs",)
    name = "btrfs"
    # a file's extent items follow its inode item in the subvolume's tree: the step's seeks read
    # that leaf whether the inode is in memory or not
    seeks_read_inode_cluster = True

    def __init__(self, mount, table=None):
        super().__init__(mount, table)
        self._devs: Optional[Dict[int, int]] = None      # devid -> dev_t
        self._chunks: Optional[List[Chunk]] = None
        self.unmapped_bytes = 0

    def _open(self) -> int:
        return os.open(self.mount.target, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)

    def device_ids(self) -> Dict[int, int]:
        """devid -> dev_t of its block devices ({} if the ioctls fail)."""
        if self._devs is None:
            self._devs = {}
            try:
                fd = self._open()
                try:
                    paths = device_list(fd)
                finally:
                    os.close(fd)
            except OSError:
                paths = {}
            for devid, path in sorted(paths.items()):
                try:
                    rdev = os.stat(path).st_rdev
                except OSError:
                    continue
                if is_block_device(rdev):
                    self._devs[devid] = rdev
        return self._devs

    def devices(self) -> List[int]:
        return list(self.device_ids().values()) or super().devices()

    @cached_property
    def _leaves(self) -> Optional[Tuple[str, bytes, int, int]]:
        """(data device node, fsid, nodesize, tree id of the subvolume mounted here): what reading
        its leaves back needs; None if not answered."""
        node = device_node(self.data_device()) if self.data_device() is not None else None
        if node is None:
            return None
        m = re.search(rb"(?:^|,)subvolid=(\d+)(?:,|$)", self.mount.options)
        try:
            fd = self._open()
            try:
                info = bytearray(1024)
                struct.pack_into("=Q", info, 48, FS_INFO_FLAG_METADATA_UUID)
                fcntl.ioctl(fd, BTRFS_IOC_FS_INFO, info, True)
            finally:
                os.close(fd)
        except OSError:
            return None
        # the uuid its tree blocks carry: the fsid, unless the fsid was changed after mkfs
        # (btrfstune -m) or this mount of a clone got a temporary one (kernel 6.7+: two copies of
        # one image mounted side by side), as the kernel checks them (metadata_uuid)
        flags = struct.unpack_from("=Q", info, 48)[0]
        fsid = bytes(info[64:80] if flags & FS_INFO_FLAG_METADATA_UUID else info[16:32])
        nodesize = struct.unpack_from("=I", info, 32)[0]
        return (node, fsid, nodesize, int(m.group(1)) if m else FS_TREE) if nodesize else None

    def inode_clusters(self, sector: int, nr_sectors: int) -> List[Tuple[int, int]]:
        """btrfs keys every item of an inode by its number, so each leaf of a subvolume's tree
        holds the inode items of a run of numbers, and a lookup of any of them reads that leaf.
        The leaves in those sectors of data_device() are read back from the device (their header
        and keys: what is there now; a block rewritten since is checked against this file
        system's fsid, as a leaf, of the subvolume mounted here) and each gives the numbers
        [first, last + 1) of its inode items. [] for other tree blocks, or a device that cannot
        be read."""
        if self._leaves is None or nr_sectors <= 0:
            return []
        node, fsid, nodesize, tree = self._leaves
        start, end = sector * 512, (sector + nr_sectors) * 512
        try:
            fd = os.open(node, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return []
        out = []
        try:
            for pos in range(start, end - nodesize + 1, nodesize):
                try:
                    blk = os.pread(fd, nodesize, pos)
                except OSError:
                    break
                if len(blk) < nodesize:
                    break
                _, bfsid, _, _, _, _, owner, nritems, level = _HEADER.unpack_from(blk)
                if bfsid != fsid or level != 0 or owner != tree or _HEADER.size + nritems * _ITEM.size > nodesize:
                    continue
                inos = [k for k, t, *_ in (_ITEM.unpack_from(blk, _HEADER.size + i * _ITEM.size)
                                           for i in range(nritems)) if t == INODE_ITEM_KEY]
                if inos:
                    out.append((min(inos), max(inos) + 1))
        finally:
            os.close(fd)
        return out

    def metadata_positions(self, entries: List[Tuple[bytes, os.stat_result]]) -> Dict[Tuple[int, int], int]:
        """Where the metadata step's lookup of each (path, lstat) reads its inode item: the byte
        offset on data_device() of the leaf of its subvolume's tree holding it. Copy-on-write
        moves a leaf whenever an item in it changes (relatime's atime update after a launch
        rewrites the leaves of every file it read), so inode order is not disk order once the
        file system has been used. {} where it cannot say (not root, a profile not mapped here):
        the step then keeps inode order."""
        return self._item_places(entries, INODE_ITEM_KEY)

    def lookup_leaves(self, entries: List[Tuple[bytes, os.stat_result]]) -> Dict[Tuple[int, int], Tuple[Optional[int], ...]]:
        """(st_dev, ino) -> the leaves a lookup of each (path, lstat) reads, as byte offsets on
        data_device() (None where not found): the one holding its name's DIR_ITEM among its
        parent directory's items (key: parent, DIR_ITEM, name_hash), the one holding its inode
        item, and for a regular file the one holding its first file extent item (which the step
        seeks). Found from the trees' nodes (leaf_positions), in the tree of each subvolume: a
        parent across a subvolume's boundary holds the name item in its own tree, one on another
        file system in none."""
        parent_of = {path: os.path.dirname(path.rstrip(b"/")) or b"/" for path, _ in entries}
        parents: Dict[bytes, Optional[os.stat_result]] = {}
        for parent in set(parent_of.values()):
            try:
                parents[parent] = os.lstat(parent)
            except OSError:
                parents[parent] = None
        by_dev: Dict[int, List[Tuple[bytes, int]]] = {}
        for path, st in entries:
            by_dev.setdefault(st.st_dev, []).append((path, st.st_ino))
        for parent, st in parents.items():
            if st is not None:
                by_dev.setdefault(st.st_dev, []).append((parent, st.st_ino))
        trees = {dev: _subvolume_of(items) for dev, items in by_dev.items()}
        wanted: Dict[Tuple[int, int], List[Optional[Tuple[int, Tuple[int, int, int]]]]] = {}
        for path, st in entries:
            parent, name, tree = parents[parent_of[path]], os.path.basename(path.rstrip(b"/")), trees.get(st.st_dev)
            wanted[(st.st_dev, st.st_ino)] = [
                (trees[parent.st_dev], (parent.st_ino, DIR_ITEM_KEY, name_hash(name)))
                if name and parent is not None and trees.get(parent.st_dev) else None,
                (tree, (st.st_ino, INODE_ITEM_KEY, 0)) if tree else None,
                (tree, (st.st_ino, EXTENT_DATA_KEY, 0)) if tree and stat.S_ISREG(st.st_mode) else None]
        searches: Dict[int, List[Tuple[int, int, int]]] = {}
        for keys in wanted.values():
            for k in keys:
                if k is not None:
                    searches.setdefault(k[0], []).append(k[1])
        found = self.leaf_positions(searches)
        return {e: tuple(found.get(k) if k is not None else None for k in keys) for e, keys in wanted.items()}

    def step_order(self, entries: List[Tuple[bytes, os.stat_result]]) -> Dict[Tuple[int, int], int]:
        """The step's order keys: the leaf offsets of metadata_positions, or, in a subvolume where
        that order is predicted to seek much more, the directories first, each group in that
        order (the files' keys raised by DIRS_FIRST). A lookup reads the leaves lookup_leaves
        names. Where directories are many and hold few entries each (a git repository's
        objects), a file's name item sits in its directory's leaf, which the pass by inode
        reaches out of turn; looking the directories up first brings those leaves in one sweep,
        and the files' own in another (git's lookups 0.81 -> 0.32 s on the emulated hdd7200).
        Elsewhere it is a second sweep over an area the one pass covers (vim 0.20 -> 0.22 s,
        python 0.25 -> 0.28: docs/replayer.md), hence the margin (DIRS_FIRST_SAVES; a pass of gcc
        predicted 10 % fewer seeks was 7 % slower)."""
        reads = self.lookup_leaves(entries)
        is_dir = {(st.st_dev, st.st_ino) for _, st in entries if stat.S_ISDIR(st.st_mode)}
        out: Dict[Tuple[int, int], int] = {}
        for dev in {st.st_dev for _, st in entries}:
            place = {e: r[1] for e, r in reads.items() if e[0] == dev and r[1] is not None}
            by_inode = sorted(place, key=lambda e: (place[e], e[1]))
            dirs_first = [e for e in by_inode if e in is_dir] + [e for e in by_inode if e not in is_dir]
            seeks, seeks_first = predicted_seeks(by_inode, reads), predicted_seeks(dirs_first, reads)
            first = seeks_first < seeks and seeks_first <= (1 - DIRS_FIRST_SAVES) * seeks
            out.update((e, pos + (DIRS_FIRST if first and e not in is_dir else 0)) for e, pos in place.items())
        return out

    def inline_data_places(self, entries: List[Tuple[bytes, os.stat_result]]) -> Dict[Tuple[int, int], int]:
        """A small file's data (up to max_inline, 2 KiB by default) is an inline file extent item
        in the subvolume's tree, beside its inode item: the leaf holding (ino, EXTENT_DATA, 0)."""
        return self._item_places(entries, EXTENT_DATA_KEY)

    def _item_places(self, entries: List[Tuple[bytes, os.stat_result]], item_type: int) -> Dict[Tuple[int, int], int]:
        """(st_dev, ino) -> the leaf holding (ino, item_type, 0) in the tree of its subvolume."""
        by_dev: Dict[int, List[Tuple[bytes, int]]] = {}
        for path, st in entries:
            by_dev.setdefault(st.st_dev, []).append((path, st.st_ino))
        trees = {dev: _subvolume_of(items) for dev, items in by_dev.items()}
        found = self.leaf_positions({t: [(i, item_type, 0) for _, i in by_dev[dev]]
                                     for dev, t in trees.items() if t})
        return {(dev, ino): found[(t, (ino, item_type, 0))] for dev, t in trees.items() if t
                for _, ino in by_dev[dev] if (t, (ino, item_type, 0)) in found}

    def leaf_positions(self, searches: Dict[int, List[Tuple[int, int, int]]]) -> Dict[Tuple[int, Tuple[int, int, int]], int]:
        """(tree id, key) -> the byte offset on data_device() of the leaf holding that key (see
        leaves_of), for searches {tree id: keys}. Found from the trees' nodes as committed after
        a syncfs (the leaves' addresses are in their parents: no leaf is read), read with
        O_DIRECT (never a stale copy in the block device's cache). {} where it cannot say (not
        root); a key on a leaf of another device or an unmapped profile is left out."""
        if self._leaves is None or not searches:
            return {}
        node, fsid, nodesize, _ = self._leaves
        main = self.data_device()
        devid = next((i for i, d in self.device_ids().items() if d == main), 1)
        out: Dict[Tuple[int, Tuple[int, int, int]], int] = {}
        buf = mmap.mmap(-1, nodesize)

        def key_ptrs(logical: int, level: int) -> Optional[List[Tuple[Tuple[int, int, int], int]]]:
            hit = to_physical(chunks, logical)
            if hit is None or hit[0] != devid or os.preadv(dfd, [buf], hit[1]) != nodesize:
                return None
            _, bfsid, bytenr, _, _, _, _, nritems, blevel = _HEADER.unpack_from(buf)
            if bfsid != fsid or bytenr != logical or blevel != level or \
                    _HEADER.size + nritems * _KEY_PTR.size > nodesize:
                return None     # not the node its parent names: the tree changed under us
            return [((o, t, off), ptr) for o, t, off, ptr, _ in
                    (_KEY_PTR.unpack_from(buf, _HEADER.size + i * _KEY_PTR.size) for i in range(nritems))]

        try:
            mfd = self._open()
            try:
                _syncfs(mfd)
                chunks = self.chunks()
                dfd = os.open(node, os.O_RDONLY | os.O_DIRECT | os.O_CLOEXEC)
                try:
                    for tree, keys in searches.items():
                        root = tree_root(mfd, tree)
                        if root is None:
                            continue
                        for key, logical in leaves_of(key_ptrs, *root, sorted(set(keys))).items():
                            hit = to_physical(chunks, logical)
                            if hit is not None and hit[0] == devid:
                                out[(tree, key)] = hit[1]
                finally:
                    os.close(dfd)
            finally:
                os.close(mfd)
        except OSError:
            return {}
        finally:
            buf.close()
        return out

    def chunks(self) -> List[Chunk]:
        if self._chunks is None:
            fd = self._open()
            try:
                self._chunks = sorted(read_chunks(fd))
            finally:
                os.close(fd)
        return self._chunks

    def extents(self, fd: int) -> List[Extent]:
        logical = super().extents(fd)
        ids = self.device_ids()
        main = self.data_device()
        devid = next((i for i, d in ids.items() if d == main), 1)
        out, left_out = translate(self.chunks(), logical, devid)
        self.unmapped_bytes += left_out
        return out
