"""Slow kernel set-ups and tear-downs of a recording run at once, each in a thread of its own.

Most of what `record` spends beyond the launch is waiting on the kernel, not computing: a tracefs
instance's creation allocates its ring buffers (~30-45 ms for 8 MiB per CPU here), its removal
waits for RCU grace periods (~30-60 ms), sync() waits for every dirty page of the machine to be
written. One after the other they were ~0.3 s of a recording; at once, they cost the longest.

AtOnce(calls) starts each call in its own (non-daemon) thread; wait() returns when every call
is done, also when Ctrl-C comes meanwhile (it is raised after all are done, so the caller knows
what was set up and can undo it), and raises the first call's error.
"""

import threading
from typing import Callable, List, Optional, Sequence


class AtOnce:
    def __init__(self, calls: Sequence[Callable[[], object]]):
        self.results: List[object] = [None] * len(calls)
        self.errors: List[Optional[BaseException]] = [None] * len(calls)
        self._threads = [threading.Thread(target=self._run, args=(i, call), name=f"warmstart-at-once-{i}")
                         for i, call in enumerate(calls)]
        for t in self._threads:
            t.start()

    def _run(self, i: int, call: Callable[[], object]) -> None:
        try:
            self.results[i] = call()
        except BaseException as e:   # handed to wait()'s caller
            self.errors[i] = e

    def wait(self) -> List[object]:
        """Every call's result, in order, once all are done; raises the first error, else a
        Ctrl-C that came while waiting."""
        interrupted: Optional[BaseException] = None
        for t in self._threads:
            while t.is_alive():
                try:
                    t.join()
                except KeyboardInterrupt as e:   # finish waiting: the caller undoes what was done
                    interrupted = e
        first = next((e for e in self.errors if e is not None), None)
        if first is not None:
            raise first
        if interrupted is not None:
            raise interrupted
        return self.results

    def succeeded(self) -> List[int]:
        """Indexes of the calls that returned (after wait())."""
        return [i for i, e in enumerate(self.errors) if e is None]
