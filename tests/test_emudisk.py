"""The emulated disks: timing matches the model, stats count what reached the disk, the aged
system image runs programs, and up/down survive repetition and crashes.

Timing tolerances: the model's own numbers are exact; the wall-clock checks allow +-15% because
FUSE round trips (~0.1-0.3 ms each on a loaded 2-core machine) and scheduling noise add to it.
"""

import json
import mmap
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import have_fuse, have_loop, require

REPO = Path(__file__).resolve().parent.parent
HEAVY_IMPORTS = ("json, email.mime.multipart, asyncio, http.client, xml.etree.ElementTree, decimal, "
                 "sqlite3, unittest, argparse, logging.handlers, concurrent.futures, urllib.request, "
                 "ssl, csv, tarfile")


def _blockstat_reads(dev):
    return int(Path(f"/sys/block/{os.path.basename(dev)}/stat").read_text().split()[0])


def _direct_fd(dev):
    return os.open(dev, os.O_RDONLY | os.O_DIRECT)


def test_loop_device_looks_like_an_hdd(emu_hdd):
    q = Path(f"/sys/block/{os.path.basename(emu_hdd.loop_dev)}")
    assert (q / "queue/rotational").read_text().strip() == "1"
    assert "[mq-deadline]" in (q / "queue/scheduler").read_text()
    assert (q / "loop/dio").read_text().strip() == "1", "loop must use direct I/O so requests reach the model"
    assert os.stat(emu_hdd.mountpoint).st_dev == emu_hdd.dev


def test_random_reads_take_seek_plus_half_rotation(emu_hdd):
    info = emu_hdd.model_info()
    # The image is the whole stroke here, so the mean seek is the documented full-stroke average.
    assert info["model_stroke_bytes"] == info["image_bytes"]
    assert abs(info["model_image_mean_seek_ns"] - 8.5e6) < 0.01e6
    # 300 reads: each is a random seek plus a uniform rotation (~4 ms spread on a 12.7 ms mean),
    # so their mean is known within ~2 %, far inside the 15 % asserted (1000 reads took 13 s)
    n = 300
    fd = _direct_fd(emu_hdd.loop_dev)
    buf = mmap.mmap(-1, 4096)
    blocks = os.lseek(fd, 0, os.SEEK_END) // 4096
    rng = random.Random(7)
    try:
        emu_hdd.reset_stats()
        t = time.monotonic()
        for _ in range(n):
            os.preadv(fd, [buf], rng.randrange(blocks) * 4096)
        elapsed = time.monotonic() - t
    finally:
        os.close(fd)
    stats = emu_hdd.stats()
    per_read_ns = info["model_image_mean_seek_ns"] + info["model_rev_ns"] / 2 + 4096 / info["model_rate_bps"] * 1e9
    expected = n * per_read_ns / 1e9
    print(f"\n{n} random 4 KiB O_DIRECT reads: {elapsed:.2f} s, model expects {expected:.2f} s "
          f"(ratio {elapsed / expected:.3f}); model busy {stats['busy_ns'] / 1e9:.2f} s")
    assert 0.85 * expected <= elapsed <= 1.15 * expected
    assert n <= stats["reads"] <= n + 20          # + a few ext4 journal reads at most
    assert stats["seeks"] >= 0.98 * n
    assert stats["bytes_read"] >= n * 4096


@pytest.mark.parametrize("chunk_mib", [64, 1], ids=["one-64MiB-read", "1MiB-reads-qd1"])
def test_sequential_read_at_media_rate(emu_hdd, chunk_mib):
    total = 64 << 20
    fd = _direct_fd(emu_hdd.loop_dev)
    buf = mmap.mmap(-1, chunk_mib << 20)
    # what earlier tests left dirty on the shared disk written back now, not between these reads
    # (4 seeks seen once in a whole suite run: something written between them moved the head)
    os.sync()
    try:
        emu_hdd.reset_stats()
        block_reads = _blockstat_reads(emu_hdd.loop_dev)
        t = time.monotonic()
        for off in range(0, total, chunk_mib << 20):
            assert os.preadv(fd, [buf], 64 << 20 | off) == chunk_mib << 20
        elapsed = time.monotonic() - t
        block_reads = _blockstat_reads(emu_hdd.loop_dev) - block_reads
    finally:
        os.close(fd)
    stats = emu_hdd.stats()
    expected = total / 130e6
    print(f"\n64 MiB sequential O_DIRECT in {chunk_mib} MiB reads: {elapsed:.3f} s, model rate expects "
          f"{expected:.3f} s (ratio {elapsed / expected:.3f}); {stats['requests']} requests, "
          f"{block_reads} block-layer reads")
    assert 0.85 * expected <= elapsed <= 1.15 * expected
    assert total <= stats["bytes_read"] <= total + (1 << 20)
    # Every block request of the loop device reached the model (FUSE may split, never merge).
    assert stats["reads"] >= block_reads >= total // (4 << 20)
    assert stats["seeks"] <= 3, stats


def test_files_round_trip_through_the_model(emu_hdd):
    d = emu_hdd.mountpoint / "roundtrip"
    d.mkdir(exist_ok=True)
    data = os.urandom(3 << 20)
    (d / "f").write_bytes(data)
    emu_hdd.drop_caches()
    emu_hdd.reset_stats()
    assert (d / "f").read_bytes() == data
    assert emu_hdd.stats()["bytes_read"] >= len(data)


def test_cold_python_import_is_several_times_slower(emu_system):
    argv = emu_system.chroot_argv(["/usr/bin/python3", "-c", f"import {HEAVY_IMPORTS}"])
    emu_system.drop_caches()
    emu_system.reset_stats()
    t = time.monotonic()
    subprocess.run(argv, check=True)
    cold = time.monotonic() - t
    cold_stats = emu_system.stats()
    warm, warm_reads_seen = [], []
    for _ in range(3):
        emu_system.reset_stats()
        t = time.monotonic()
        subprocess.run(argv, check=True)
        warm.append(time.monotonic() - t)
        warm_reads_seen.append(emu_system.stats()["reads"])
    # served from the page cache: a few stray blocks at most, nothing like the cold launch's hundreds.
    # ext4 writing back the atimes and the journal of the cold run reads some metadata blocks while the
    # first warm launches run (CI has seen 1, 3 and 12 of 329), so the bound is on the quietest one,
    # and every one stays an order of magnitude below the cold launch
    assert min(warm_reads_seen) * 50 <= cold_stats["reads"], \
        f"no warm launch was served from the page cache: {warm_reads_seen} reads (cold {cold_stats['reads']})"
    assert max(warm_reads_seen) * 10 <= cold_stats["reads"], \
        f"a warm launch reached the disk: {warm_reads_seen} reads (cold {cold_stats['reads']})"
    ratio = cold / min(warm)
    print(f"\ncold python3 import of 15 modules on the emulated HDD: {cold:.2f} s, warm {min(warm):.3f} s, "
          f"ratio {ratio:.1f}x; cold reached the disk with {cold_stats['reads']} reads, "
          f"{cold_stats['seeks']} seeks, {cold_stats['bytes_read'] >> 20} MiB; warm with {warm_reads_seen} reads")
    assert cold_stats["reads"] > 50 and cold_stats["seeks"] > 10
    assert ratio >= 6   # docs/emulated-disk.md: 6-19x (16-18x with a CPU kept busy, 2026-12-02)


def test_system_image_runs_gcc_and_node(emu_system):
    gcc = subprocess.run(emu_system.chroot_argv(["/usr/bin/gcc", "-c", "-x", "c", "-o", "/tmp/t.o", "-"]),
                         input=b"#include <stdio.h>\nint main(void){puts(\"hi\");return 0;}\n",
                         capture_output=True)
    assert gcc.returncode == 0, gcc.stderr
    node = subprocess.run(emu_system.chroot_argv(["/usr/bin/node", "-e", "console.log(6*7)"]), capture_output=True)
    assert node.returncode == 0 and node.stdout == b"42\n", node.stderr


def test_system_image_is_a_partition_of_a_larger_drive(emu_system):
    info = emu_system.model_info()
    assert info["model_stroke_bytes"] == 10 * info["image_bytes"]
    assert info["model_image_mean_seek_ns"] < 0.6 * info["model_avg_seek_ns"]


def _no_traces(name):
    mounts = Path("/proc/self/mountinfo").read_text()
    loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    return f"/run/warmstart-emu/{name}/" not in mounts and f"/{name}.img" not in loops \
        and f"/{name}/fuse/disk" not in loops


def test_up_down_idempotent_and_crash_recovery():
    require(have_fuse() and have_loop(), "needs root, /dev/fuse, fusermount3 and loop devices")
    from warmstart.emudisk import EmuDisk
    name = f"pytest-idem-{os.getpid()}"
    try:
        d = EmuDisk.up(name=name, profile="hdd7200", size_mb=32, fresh=True)
        again = EmuDisk.up(name=name, profile="hdd7200", size_mb=32)
        assert again.loop_dev == d.loop_dev, "a healthy disk is reused"
        d.down()
        d.down()                                   # twice is fine
        assert _no_traces(name)
        d = EmuDisk.up(name=name, profile="hdd7200", size_mb=32)
        (d.mountpoint / "before").write_bytes(b"x")
        state = json.loads((Path("/run/warmstart-emu") / name / "state.json").read_text())
        os.kill(state["hddsim_pid"], signal.SIGKILL)    # the crash
        time.sleep(0.2)
        assert not EmuDisk.attach(name).healthy()
        d = EmuDisk.up(name=name, profile="hdd7200", size_mb=32)
        assert d.healthy()
        (d.mountpoint / "after").write_bytes(b"y" * 10000)
        d.drop_caches()
        assert (d.mountpoint / "after").read_bytes() == b"y" * 10000
        assert d.stats()["reads"] > 0
    finally:
        EmuDisk.down_by_name(name)
    assert _no_traces(name)


def test_a_disks_model_key_names_what_its_timing_depends_on(emu_hdd):
    """bench keeps one measured profile per key (bench.matrix.ensure_profile): a disk of the same
    model and size shares it on another loop device with another file system; another model
    parameter or size does not."""
    from warmstart.emudisk import EmuDisk
    names = [f"pytest-key{i}-{os.getpid()}" for i in range(3)]
    try:
        twin = EmuDisk.up(name=names[0], profile="hdd7200", size_mb=512, fs="xfs", fresh=True)
        slower = EmuDisk.up(name=names[1], profile="hdd7200", size_mb=512, hddsim_args=["--rpm", "5400"], fresh=True)
        smaller = EmuDisk.up(name=names[2], profile="hdd7200", size_mb=256, fresh=True)
        assert twin.loop_dev != emu_hdd.loop_dev and twin.model_key() == emu_hdd.model_key()
        assert len({emu_hdd.model_key(), slower.model_key(), smaller.model_key()}) == 3
    finally:
        for name in names:
            EmuDisk.down_by_name(name)


def test_images_are_copied_from_tmpfs_copies_kept_within_a_budget(tmp_path, monkeypatch):
    """A disk's image is copied from a copy of the cached image in tmpfs (which drop_caches does
    not empty), made once, kept sparse, made again when the cached image is rebuilt; beyond the
    budget the least recently used copies go."""
    from warmstart.emudisk import image
    monkeypatch.setenv("WARMSTART_EMU_TMPFS", str(tmp_path / "shm"))
    monkeypatch.setattr(image, "staged_budget", lambda: (5 << 20) // 2)   # two 1 MiB copies
    cached = []
    for i in range(3):
        cached.append(tmp_path / f"system-{i}.img")
        with open(cached[-1], "wb") as f:
            f.truncate(64 << 20)
            f.seek(i << 20)
            f.write(os.urandom(1 << 20))
    stage = tmp_path / "shm" / "images"
    image.copy_image(cached[0], tmp_path / "a.img")
    assert (tmp_path / "a.img").read_bytes() == cached[0].read_bytes()
    first = (stage / "system-0.img").stat()
    assert first.st_blocks * 512 < 2 << 20   # sparse
    image.copy_image(cached[0], tmp_path / "b.img")
    assert (stage / "system-0.img").stat().st_ino == first.st_ino   # copied once
    image.copy_image(cached[1], tmp_path / "c.img")
    image.copy_image(cached[0], tmp_path / "d.img")                 # 0 used after 1
    image.copy_image(cached[2], tmp_path / "e.img")
    assert sorted(p.name for p in stage.iterdir()) == ["system-0.img", "system-2.img"]
    with open(cached[0], "r+b") as f:                                # rebuilt
        f.write(b"new")
    os.utime(cached[0], ns=(time.time_ns() + 10**9,) * 2)
    image.copy_image(cached[0], tmp_path / "f.img")
    assert (tmp_path / "f.img").read_bytes()[:3] == b"new" and (tmp_path / "f.img").stat().st_size == 64 << 20


def test_images_live_in_a_tmpfs_of_their_own_in_large_pages(tmp_path, monkeypatch):
    """Every drop_caches walks the cached pages of every file, tmpfs ones too, which it cannot
    drop: the images get a tmpfs of their own, mounted once by the first caller with
    huge=within_size (large pages where the file is written), and the copies staged in /dev/shm
    before it are removed (not a live disk's image there)."""
    require(os.geteuid() == 0, "mounts a tmpfs: needs root")
    from warmstart.emudisk import image, sysops
    from warmstart.mountinfo import mounts
    mem, legacy = tmp_path / "mem", tmp_path / "shm"
    (legacy / "images").mkdir(parents=True)
    (legacy / "images" / "system-x.img").write_bytes(b"x")
    (legacy / "live.img").write_bytes(b"y")
    monkeypatch.delenv("WARMSTART_EMU_TMPFS", raising=False)
    monkeypatch.setattr(image, "TMPFS", mem)
    monkeypatch.setattr(image, "LEGACY_TMPFS", legacy)
    try:
        assert image.tmpfs_dir() == mem and image.tmpfs_dir() == mem
        mine = [m for m in mounts() if m.target == os.fsencode(mem)]
        assert len(mine) == 1 and mine[0].fstype == "tmpfs" and b"huge=within_size" in mine[0].options, mine
        assert not (legacy / "images").exists() and (legacy / "live.img").exists()
    finally:
        sysops.unmount_all_under(mem)


def test_ssd_profile():
    require(have_fuse() and have_loop(), "needs root, /dev/fuse, fusermount3 and loop devices")
    from warmstart.emudisk import EmuDisk
    d = EmuDisk.up(name=f"pytest-ssd-{os.getpid()}", profile="ssd", size_mb=64, fresh=True)
    try:
        q = Path(f"/sys/block/{os.path.basename(d.loop_dev)}/queue")
        assert q.joinpath("rotational").read_text().strip() == "0"
        fd = _direct_fd(d.loop_dev)
        buf = mmap.mmap(-1, 4096)
        n = 300
        rng = random.Random(3)
        try:
            d.reset_stats()
            t = time.monotonic()
            for _ in range(n):
                os.preadv(fd, [buf], rng.randrange(64 * 256) * 4096)
            elapsed = time.monotonic() - t
        finally:
            os.close(fd)
        s, info = d.stats(), d.model_info()
        model = n * (info["model_latency_ns"] + 4096 / info["model_rate_bps"] * 1e9) / 1e9
        print(f"\n{n} random 4 KiB reads on the ssd profile: {elapsed * 1e6 / n:.0f} us each "
              f"(model {model * 1e6 / n:.0f} us + FUSE/loop overhead)")
        assert s["reads"] >= n and s["seeks"] == 0
        assert abs(s["busy_ns"] / 1e9 - model) < 0.05 * model   # QD1: busy = n x service time
        # FUSE and loop add their round trip, which depends on the host and its load
        # (docs/emulated-disk.md: 160-250 us a read on one host, 295-381 us on another, 674 us
        # in a fresh-clone CI run there, against the model's 98 us): what is asserted is that it
        # is not a disk that seeks, under 2 ms a read (an HDD's ~12 ms)
        assert model <= elapsed < n * 0.002
    finally:
        d.down()


def test_profile_none_counts_from_the_block_layer():
    require(have_loop(), "needs root and loop devices")
    from warmstart.emudisk import EmuDisk
    d = EmuDisk.up(name=f"pytest-none-{os.getpid()}", profile="none", size_mb=32, fresh=True)
    try:
        (d.mountpoint / "f").write_bytes(b"z" * 200000)
        d.drop_caches()
        d.reset_stats()
        assert (d.mountpoint / "f").read_bytes() == b"z" * 200000
        s = d.stats()
        assert s["bytes_read"] >= 200000 and s["seeks"] is None
    finally:
        d.down()


def test_cli_help_and_errors():
    script = REPO / "scripts" / "emu-disk"
    for sub in ([], ["up"], ["down"], ["stats"]):
        p = subprocess.run([str(script), *sub, "--help"], capture_output=True, text=True)
        assert p.returncode == 0 and "Example" in p.stdout
    p = subprocess.run([str(script), "stats", "--name", "no-such-disk-here"], capture_output=True, text=True)
    assert p.returncode == 1 and "scripts/emu-disk up --name no-such-disk-here" in p.stderr
    p = subprocess.run([str(REPO / "build" / "hddsim"), "--profile", "hdd7200", "--image", "/nonexistent", "/tmp"],
                       capture_output=True, text=True)
    assert p.returncode != 0 and "/nonexistent" in p.stderr


@pytest.mark.parametrize("fs", ["xfs", "btrfs"])
def test_xfs_and_btrfs_images_on_the_emulated_disk(fs, request):
    """An empty XFS or btrfs image mounts on the modelled disk, and its files' reads reach the
    model (the disk counts them) like ext4's."""
    disk = request.getfixturevalue(f"emu_{fs}")
    assert disk.fs == fs
    mounted = [l.split() for l in Path("/proc/self/mounts").read_text().splitlines()]
    assert [m[2] for m in mounted if m[1] == str(disk.mountpoint)] == [fs]
    data = os.urandom(3 << 20)
    (disk.mountpoint / "f").write_bytes(data)
    disk.drop_caches()
    disk.reset_stats()
    assert (disk.mountpoint / "f").read_bytes() == data
    assert disk.stats()["bytes_read"] >= len(data)


def _tree(top) -> dict:
    """relative path -> size (files), -1 (directories) or the link target (symlinks)."""
    out = {}
    for dirpath, dirs, files in os.walk(top):
        for n in dirs + files:
            p = os.path.join(dirpath, n)
            out[os.path.relpath(p, top)] = os.readlink(p) if os.path.islink(p) else \
                (-1 if os.path.isdir(p) else os.lstat(p).st_size)
    return out


def test_system_image_in_each_file_system():
    """The system image in ext4, XFS and btrfs: one file list written by one writer, so the same
    paths, sizes and link targets in each; cached per file system; two copies of one image (a
    bench's disk and a test's) mounted side by side; an overlayfs over it runs the image's
    programs and goes down with the disk."""
    require(have_fuse() and have_loop(), "needs root, /dev/fuse, fusermount3 and loop devices")
    from warmstart.emudisk import EmuDisk, system_image
    assert len({system_image.cached_image(fs=fs) for fs in ("ext4", "xfs", "btrfs")}) == 3
    trees, names = {}, []
    try:
        for fs in ("ext4", "xfs", "btrfs"):
            names.append(f"pytest-img{fs}-{os.getpid()}")
            d = EmuDisk.up(name=names[-1], profile="none", image="system", fs=fs, fresh=True)
            mounted = [m.split() for m in Path("/proc/self/mounts").read_text().splitlines()]
            assert [m[2] for m in mounted if m[1] == str(d.mountpoint)] == [fs]
            trees[fs] = _tree(d.mountpoint / "usr")
            if fs != "ext4":   # a second copy of the same image, up at the same time
                names.append(f"pytest-img{fs}2-{os.getpid()}")
                twin = EmuDisk.up(name=names[-1], profile="none", image="system", fs=fs, fresh=True)
                assert twin.healthy() and d.healthy()
            root = d.overlay()
            p = subprocess.run(d.chroot_argv(["python3", "-c", "import json; print(json.__file__)"], root=root),
                               capture_output=True, text=True)
            assert p.returncode == 0 and p.stdout.strip() == "/usr/lib/python3.11/json/__init__.py", p.stderr
            mounted = [m.split() for m in Path("/proc/self/mounts").read_text().splitlines()]
            assert [m[2] for m in mounted if m[1] == str(root)] == ["overlay"]
    finally:
        for name in names:
            EmuDisk.down_by_name(name)
    assert all(_no_traces(name) for name in names)
    assert len(trees["ext4"]) > 5000
    for fs in ("xfs", "btrfs"):
        diff = set(trees[fs].items()) ^ set(trees["ext4"].items())
        assert not diff, f"{fs}: {len(diff)} entries differ from ext4's, e.g. {sorted(diff)[:3]}"
