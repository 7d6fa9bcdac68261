"""The tracefs block backend: block tracepoints in a dedicated instance, reads only.

No pid filter, because requests issued by kernel threads (kworker, kblockd, loop workers) on the
launch's behalf must be seen too; attribution.py keeps only the launch's requests. Writes are
filtered out in the kernel: no launch sequence holds them (the analysis skips them), and every
other process's writeback (a copy, a build) would take room in the buffer. A one-second
recording in a CI run lost 23,661 events and could not be analyzed; writeback filling this
buffer is the likely cause (not reproduced).
"""

from pathlib import Path
from typing import List, Optional

from .backend import BlockBackend
from .events import assemble_requests
from ..model import BlockRequest
from .tracefs import Instance

BLOCK_EVENTS = ("block/block_bio_queue", "block/block_rq_issue", "block/block_rq_complete")
READS_ONLY = 'rwbs ~ "*R*"'    # R: a read (RA readahead, RM metadata, RS sync); writes carry W


class TracefsBlockBackend(BlockBackend):
    name = "tracefs"

    def __init__(self, root: Path, buffer_kb: int = 8192):
        self.instance = Instance(root, "blk", BLOCK_EVENTS, buffer_kb=buffer_kb, options=("record-tgid",),
                                 filters={ev: READS_ONLY for ev in BLOCK_EVENTS})
        self._requests: Optional[List[BlockRequest]] = None

    def __enter__(self):
        self.instance.__enter__()
        return self

    def __exit__(self, *exc):
        self.instance.close()
        return False

    def start(self):
        self.instance.start()

    def stop(self):
        self.instance.stop()

    def check(self):
        self.instance.check()

    def lost_events(self) -> int:
        return self.instance.lost_events()

    def requests(self) -> List[BlockRequest]:
        if self._requests is None:
            self._requests = assemble_requests(self.instance.take())
        return self._requests
