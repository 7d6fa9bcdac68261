"""The fetch order inside a segment: metadata first, then data, each in LBA order.

The kernel must read an inode, directory or extent block before it can issue the data reads that
depend on it (and so must the replayer's own file reads), so a segment's metadata ranges are
fetched at its start in one LBA-sorted sweep, followed by one LBA-sorted sweep of its data
(Paralfetch, FAST '23, does the same). "Metadata" here is every block-device range (a range
that maps to no file), not only requests the trace flagged as metadata: ext4's inode-table
readahead (128 KiB reads of inode blocks that open() needs) is not flagged REQ_META, and leaving it
in the data sweep made the replayer's opens seek back for it (the same 20 MB pre-buffer took
0.445 s instead of 0.41 s on the emulated HDD). The replayer's `reorder` uses the same rule. With metadata_first=False a segment is one sweep, as in
the paper's SORT(). fetch_order() is the rule for a list of Ranges (import re-sorts with it);
the C replayer fetches a segment's ranges in the order the schedule stores them.

All pieces of P are sorted once by (kind, dev, sector); a segment's order is then the subsequence
of that global order whose items fall in [a, b], which numpy selects in one pass.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Iterable, List, Sequence, Tuple, TypeVar, Union

from ..model import Range
from .filemap import Piece

if TYPE_CHECKING:
    import numpy as np  # numpy is imported where the model runs, not when the CLI starts


def fetch_kind(item: Union[Piece, Range], metadata_first: bool = True) -> int:
    """The sweep an item is fetched in: 0 the metadata sweep (a range that maps to no file), 1 data."""
    return 0 if item.file is None and metadata_first else 1


R = TypeVar("R", Piece, Range)


def fetch_order(ranges: Iterable[R], metadata_first: bool = True) -> List[R]:
    """ranges in fetch order: (sweep, dev, sector). A device range listed twice (the same metadata
    blocks read by two segments that were merged) is fetched once."""
    seen, out = set(), []
    for r in ranges:
        if r.file is None:
            key = (r.dev, r.sector, r.nr_sectors)
            if key in seen:
                continue
            seen.add(key)
        out.append(r)
    return sorted(out, key=lambda r: (fetch_kind(r, metadata_first), r.dev, r.sector))


class PieceTable:
    """The pieces of every p_i, flattened: item index, dev, byte start, byte length, kind."""

    def __init__(self, pieces_per_item: Sequence[Sequence[Piece]], metadata_first: bool = True):
        import numpy as np
        self.pieces: List[Piece] = []
        item = []
        for i, ps in enumerate(pieces_per_item):
            for p in ps:
                self.pieces.append(replace(p, first_p=i + 1))  # interleave's fetch order
                item.append(i)
        self.metadata_first = metadata_first
        n = len(self.pieces)
        self.item = np.array(item, dtype=np.int64)
        self.dev = np.array([p.dev for p in self.pieces], dtype=np.int64)
        self.start = np.array([p.sector * 512 for p in self.pieces], dtype=np.int64)
        self.length = np.array([p.nr_sectors * 512 for p in self.pieces], dtype=np.int64)
        kind = np.array([fetch_kind(p, metadata_first) for p in self.pieces], dtype=np.int64)
        self.kind = kind
        self.order = np.lexsort((self.start, self.dev, kind)) if n else np.zeros(0, dtype=np.int64)
        self._item_sorted = self.item[self.order]

    def indexes(self, a: int, b: int) -> np.ndarray:
        """Piece indexes of p[a..b] in fetch order."""
        sel = (self._item_sorted >= a) & (self._item_sorted <= b)
        return self.order[sel]

    def arrays(self, a: int, b: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        idx = self.indexes(a, b)
        return self.dev[idx], self.start[idx], self.length[idx]

    def segment_pieces(self, a: int, b: int) -> List[Piece]:
        return [self.pieces[i] for i in self.indexes(a, b)]
