"""The tracefs block backend: block tracepoints in a dedicated, unfiltered instance.

Unfiltered because requests issued by kernel threads (kworker, kblockd, loop workers) on the
launch's behalf must be seen too; attribution.py keeps only the launch's requests.
"""

from pathlib import Path
from typing import List, Optional

from .backend import BlockBackend
from .events import assemble_requests
from ..model import BlockRequest
from .tracefs import Instance

BLOCK_EVENTS = ("block/block_bio_queue", "block/block_rq_issue", "block/block_rq_complete")


class TracefsBlockBackend(BlockBackend):
    name = "tracefs"

    def __init__(self, root: Path, buffer_kb: int = 8192):
        self.instance = Instance(root, "blk", BLOCK_EVENTS, buffer_kb=buffer_kb, options=("record-tgid",))
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
