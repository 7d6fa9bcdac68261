"""`profile-disk`: measure a device's seek curve and transfer rates with O_DIRECT probes.

After competitive-prefetching.md §5: f_seek (switch time vs distance, average rotational delay
included) and f_transfer (sequential rate vs location), from which C_switch (the mean switch
between random points of the device) and R_tr follow. Probes through warmstart-probe, QD 1 unless said:
- rate: at 8 places, a positioning read then 4 x 1 MiB sequential reads (the first is not counted);
- overhead: 16 back-to-back 4 KiB reads (the drive streams them: what is left is per-request cost);
- seek: for ~16 distances from 64 KiB to 90% of the device, SAMPLES pairs (random x, then x - d),
  the second read's time minus its transfer; forward pairs (x, x + d) show how far the drive
  streams through a gap (stream_bytes);
- parallel: PARALLEL_READS random 4 KiB reads in LBA order at QD 1 and at PARALLEL_QD (the
  ratio of the times: DiskProfile.parallel), and scattered MiB reads at PARALLEL_QD against the
  fastest place's QD 1 rate (parallel_rate): what requests in flight together save, >= 1.
On a 7200 rpm disk this takes ~10 s; the whole run is bounded well under 2 minutes.
"""

import math
import os
import random
import statistics
import time
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from .. import devices
from ..db import profiles as profile_db
from ..errors import WarmstartError
from ..model import DiskProfile
from ..fs import FileSystems
from . import kept
from .probe import device_path, device_size, run

MiB = 1 << 20
PARALLEL_READS, PARALLEL_QD = 32, 32


def _distances(size: int) -> List[int]:
    out, d = [], 64 * 1024
    while d < size * 0.9:
        out.append(d)
        d *= 2
    out.append(int(size * 0.9) // 4096 * 4096)
    return out


def measure(path: str, samples: int = 5, seed: int = 1, progress: Optional[Callable[[int, int], None]] = None) -> Tuple[DiskProfile, float]:
    """Profile the device (or file) at path; returns (profile, seconds it took)."""
    t0 = time.monotonic()
    size = device_size(path)
    if size < 64 * MiB:
        raise WarmstartError(f"{path} is only {size} bytes: profile-disk needs at least 64 MiB")
    rng = random.Random(seed)
    dists = _distances(size)
    steps = 3 + len(dists)
    done = 0

    # Transfer rate by location.
    rate_curve = []
    for k in range(8):
        off = int((size - 8 * MiB) * k / 7) // MiB * MiB
        r = run(path, [(off, 4096)] + [(off + 4096 + i * MiB, MiB) for i in range(4)])
        rate_curve.append((float(off), 3 * MiB / sum(r.request_s[2:])))
    done += 1
    progress and progress(done, steps)
    r_tr = statistics.mean(x for _, x in rate_curve)
    # Scattered MiB reads many in flight (what a prefetch reads, the bound's floor rate: see
    # "Requests in flight" below), timed once now and again at the end: a slow spell of a busy
    # machine seldom covers both.
    big = [(x, MiB) for x in sorted({rng.randrange(0, size - MiB) // 4096 * 4096 for _ in range(PARALLEL_READS)})]
    big_early = run(path, big, qd=PARALLEL_QD).runs_s

    # Per-request overhead: short sequential reads the drive has in its buffer.
    off = size // 3 // 4096 * 4096
    r = run(path, [(off + i * 4096, 4096) for i in range(17)])
    overhead = max(0.0, statistics.median(r.request_s[1:]) - 4096 / r_tr)
    done += 1
    progress and progress(done, steps)

    back, fwd = [], []
    for d in dists:
        ranges = []
        for _ in range(samples):
            x = rng.randrange(d, size - 4096) // 4096 * 4096
            ranges += [(x, 4096), (x - d, 4096)]
        for _ in range(samples):
            x = rng.randrange(0, size - d - 4096) // 4096 * 4096
            ranges += [(x, 4096), (x + d, 4096)]
        rng.shuffle(pairs := [ranges[i:i + 2] for i in range(0, len(ranges), 2)])
        r = run(path, [x for p in pairs for x in p])
        tb, tf = [], []
        for i, p in enumerate(pairs):
            t = max(0.0, r.request_s[2 * i + 1] - 4096 / r_tr - overhead)
            (tb if p[1][0] < p[0][0] else tf).append(t)
        back.append((float(d), statistics.median(tb)))
        fwd.append((float(d), statistics.median(tf)))
        done += 1
        progress and progress(done, steps)

    # The drive streams through a forward gap when that is clearly cheaper than a switch.
    stream = 0.0
    for (d, tb), (_, tf) in zip(back, fwd):
        if tf < 0.6 * tb:
            stream = d
        else:
            break
    seek_curve = [(1.0, back[0][1])] + back
    # Monotone curve: a longer seek never costs less. Taken as the running minimum from the long
    # end, so one slow sample (another process on the shared CPU) cannot lift every longer distance.
    mono, m = [], float("inf")
    for d, t in reversed(seek_curve):
        m = min(m, t)
        mono.append((d, m))
    mono.reverse()
    c_switch = mean_random_switch(mono, float(size))

    # Requests in flight together. Positioning: the same sorted scattered 4 KiB reads one at a time
    # and PARALLEL_QD at once. Transfer: PARALLEL_READS sorted scattered MiB at PARALLEL_QD (with
    # 16 MiB the bound's floor came out 0.99-1.03 x a 24 MiB probe's time, 1.12 x once in CI:
    # tests/test_bound.py), against the fastest place's rate one at a time. Each the best of
    # runs that agree, spread over 0.3 s at least (best_run).
    batch = [(x, 4096) for x in sorted({rng.randrange(0, size - 4096) // 4096 * 4096 for _ in range(PARALLEL_READS)})]
    serial, together = (best_run(path, batch, qd) for qd in (1, PARALLEL_QD))
    parallel = max(1.0, serial / max(together, 1e-9))
    t_big = min(big_early + [best_run(path, big, PARALLEL_QD)])
    parallel_rate = max(1.0, len(big) * MiB / max(t_big, 1e-9) / max(x for _, x in rate_curve))
    done += 1
    progress and progress(done, steps)
    prof = DiskProfile(seek_curve=mono, rate_curve=rate_curve, overhead_s=overhead, stream_bytes=stream,
                       c_switch_s=c_switch, r_tr_Bps=r_tr, size_bytes=size, device=path,
                       parallel=parallel, parallel_rate=parallel_rate,
                       extra={"forward_curve": fwd, "samples": samples})
    return prof, time.monotonic() - t0


def best_run(path: str, ranges: Sequence[Tuple[int, int]], qd: int, agree: float = 0.03,
             least: int = 2, most: int = 8, span_s: float = 0.3) -> float:
    """The device's time for ranges at qd: the fastest run, once the two fastest agree within
    `agree` and the runs add up to `span_s` (at least `least` runs, at most `most`). The bound's
    floor takes the in-flight rate from here (analyzer/bound.py), so one run slowed by another
    process must not set it, and a device behind a busy CPU (an emulated one, a VM's) slows runs
    by chance, sometimes for a spell longer than two short runs: a batch an SSD reads in 70 ms is
    timed over 0.3 s (1.042 x the later probe's time once in CI when it was not). The runs a span
    still needs are made by one probe process."""
    runs = sorted(run(path, ranges, qd=qd, repeat=least).runs_s)
    while len(runs) < most and (runs[1] > (1 + agree) * runs[0] or sum(runs) < span_s):
        need = max(1, math.ceil((span_s - sum(runs)) / max(runs[0], 1e-6)))
        runs = sorted(runs + run(path, ranges, qd=qd, repeat=min(need, most - len(runs))).runs_s)
    return runs[0]


def measure_through_file(directory, size: int = 1 << 30, samples: int = 5) -> Tuple[DiskProfile, float]:
    """Profile the disk under `directory` through a file of real data written there, for a device
    that refuses O_DIRECT opens of its node (a VM's disk can, even for root). The file spans only
    part of the disk, so long seeks are under-sampled; it is removed afterwards."""
    path = os.path.join(directory, f".warmstart-profile-{os.getpid()}")
    chunk = random.Random(7).randbytes(MiB)   # real data: unwritten extents read as zeros, with no I/O
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            for _ in range(size // MiB):
                os.write(fd, chunk)
            os.fsync(fd)
        finally:
            os.close(fd)
        return measure(path, samples=samples)
    finally:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


# Device classes, for a disk that can be timed neither through its node nor through a file (a
# read-only or full file system on a device whose node refuses O_DIRECT): the order of
# magnitude of a desktop 7200 rpm drive (the emulated disk's parameters, scripts/hddsim/
# hdd_model.c: 1-16 ms seeks on a square-root curve plus half a revolution, 130 MB/s) and of a
# SATA-class SSD (~0.1 ms per random read at QD 1, ~500 MB/s). Used only when nothing was timed,
# and said so in analyze's output.
CLASS_MODELS = {True: (1.0e-3, 16.0e-3, 0.5 * 60 / 7200, 130e6), False: (0.0, 0.0, 0.1e-3, 500e6)}


def class_profile(rotational: bool, size: int) -> DiskProfile:
    track, full, latency, rate = CLASS_MODELS[rotational]
    size = max(size, 1 << 30)
    curve = [(float(d), latency + track + (full - track) * min(1.0, d / size) ** 0.5)
             for d in [4096] + _distances(size)]
    c_switch = mean_random_switch(curve, float(size))
    return DiskProfile(seek_curve=curve, rate_curve=[(0.0, rate), (float(size), rate)], overhead_s=20e-6,
                       stream_bytes=0.0, c_switch_s=c_switch, r_tr_Bps=rate, size_bytes=size,
                       device=f"class model ({'rotational' if rotational else 'non-rotational'})")


def writable_dir_on(dev: int, candidates=("/var/tmp", "/tmp", "/var/cache", "/root")) -> Optional[str]:
    """A directory on a file system whose data is on device `dev` where a scratch file can be
    written (btrfs: st_dev is anonymous, its device list says where the data is)."""
    fss = FileSystems()
    for d in candidates:
        try:
            if not os.access(d, os.W_OK):
                continue
            fs = fss.of_path(os.path.realpath(os.fsencode(d)))
            if os.stat(d).st_dev == dev or (fs is not None and fs.data_device() == dev):
                return d
        except OSError:
            continue
    return None


def profile_without_node(dev: int, rotational: Optional[bool], size: int = 256 * MiB,
                         reuse: bool = False) -> Tuple[DiskProfile, str]:
    """A profile of a device whose node cannot be read with O_DIRECT: timed through a scratch
    file on its file system if one can be written there, else the model of its class. A timed
    profile is kept for the machine (analyzer/kept.py); with reuse, one kept for this disk less
    than kept.MAX_AGE_S ago is taken instead of timing it again (analyze: every database
    analyzing apps of this disk would otherwise time it once). Returns (profile, how it was
    obtained)."""
    key = kept.device_key(dev)
    found = kept.load(key, kept.MAX_AGE_S) if reuse else None
    if found is not None:
        prof, meta = found
        return prof, f"kept from a timing of this disk on {kept.when(meta['measured_at'])} ({meta['path']})"
    where = writable_dir_on(dev)
    if where is not None:
        try:
            prof, took = measure_through_file(where, size=size)
            kept.keep(key, prof, took)
            return prof, f"timed through a {size >> 20} MiB file in {where} ({took:.1f} s)"
        except (WarmstartError, OSError) as e:
            why = str(e)
    else:
        why = "no writable directory on it"
    prof, what = class_model(rotational, size)
    return prof, f"not timed ({why}): {what}"


def class_model(rotational: Optional[bool], size: int) -> Tuple[DiskProfile, str]:
    """The model of a device's class (rotational when unknown) and how to name it."""
    rot = True if rotational is None else rotational
    return class_profile(rot, size), (f"the {'rotational' if rot else 'non-rotational'} class model"
                                      + ("" if rotational is not None else " (class unknown)"))


def mean_random_switch(profile_curve: Sequence[Tuple[float, float]], span: float) -> float:
    """Average switch time between two uniformly random points of a span (density 2(s-x)/s^2)."""
    import numpy as np
    xs = (np.arange(2000) + 0.5) / 2000 * span
    lsd = np.log([max(1.0, d) for d, _ in profile_curve])
    st = np.array([t for _, t in profile_curve])
    t = np.interp(np.log(np.maximum(1.0, xs)), lsd, st)
    return float(np.sum(t * 2 * (span - xs) / span ** 2 * (span / 2000)))


# -- the stored profile a schedule is modelled with ------------------------------------------

def main_dev(conn, ranges: Iterable) -> int:
    """The device a schedule is timed on: of the devices its ranges (or pieces) read, the most-read
    one among those with a stored profile, else the most-read one (a chroot launch also reads the
    host's root disk a little)."""
    size: Dict[int, int] = {}
    for r in ranges:
        size[r.dev] = size.get(r.dev, 0) + r.nr_sectors
    return profile_db.main_device(conn, size) if size else 0


def stored_profile(conn, dev: int) -> Tuple[Optional[str], Optional[Tuple[int, DiskProfile]]]:
    """(the device's node or None, (id, profile) of its newest stored profile or None): one of the
    device's present size when the node can be opened (loop device numbers get reused), else any."""
    path = None
    try:
        path = device_path(dev)
        return path, profile_db.latest_profile(conn, dev, device_size(path))
    except (WarmstartError, OSError):
        return path, profile_db.latest_profile(conn, dev)


def model_profile(conn, dev: int) -> Tuple[Optional[int], DiskProfile, str]:
    """(profile id or None, profile, where it came from) to model a schedule on dev where nothing
    is timed (import, relocation): the stored profile, else the model of the device's class, as
    profile_without_node ends up with when it cannot time the device (no scratch file is written
    to time it here: these are estimates, and `warmstart profile-disk` makes a real profile)."""
    path, row = stored_profile(conn, dev)
    if row is not None:
        return row[0], row[1], f"profile {row[0]} of {path or dev}"
    prof, what = class_model(devices.rotational(dev), devices.size_bytes(dev))
    name = path or f"device {os.major(dev)}:{os.minor(dev)}"
    return None, prof, (f"no stored profile of {name}: {what}; run `warmstart profile-disk "
                        f"{path or '/dev/...'}` for this disk's own timing")
