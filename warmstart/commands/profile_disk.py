"""`warmstart profile-disk DEVICE`: measure a device's seek curve and transfer rate."""

import os

import click

from .. import devices
from ..analyzer import profile as profiler
from ..analyzer.probe import check_direct, device_path
from ..cli import emit, json_option
from ..db.profiles import save_profile
from ..errors import WarmstartError
from ..fs import FileSystems


def disk_of_dir(path: str) -> int:
    """The block device holding the data of the file system of path (btrfs: from its device
    list, not its anonymous st_dev); WarmstartError naming the fix where there is none."""
    fs = FileSystems().of_path(os.path.realpath(os.fsencode(path)))
    dev = fs.data_device() if fs is not None else None
    if dev is None:
        why = fs.cannot_map() if fs is not None else "on no mounted file system"
        hint = " (overlayfs: give a directory of its lower layer)" if fs is not None and fs.name == "overlay" else ""
        raise WarmstartError(f"{path}: {why or 'no block device'}; give a block device or a directory "
                             f"of a disk's file system{hint}")
    return dev


@click.command("profile-disk")
@click.argument("device", type=click.Path())
@click.option("--samples", type=int, default=5, show_default=True, help="Probe pairs per seek distance.")
@click.option("--strip-size", type=int, default=0, help="Strip size in bytes, if a striped array.")
@click.option("--stripe-disks", type=int, default=0, help="Member disks, if a striped array.")
@json_option
@click.pass_obj
def profile_disk(ctx, device, samples, strip_size, stripe_disks, as_json):
    """Measure DEVICE with O_DIRECT reads (read-only) and store its profile.

    DEVICE may also be a directory: the disk of its file system is profiled. A disk whose node
    refuses O_DIRECT (a VM's or container's root disk) is timed through a scratch file on its
    file system instead, or, where none can be written, given the model of its class.

    \b
    Examples:
      warmstart profile-disk /dev/loop3
      warmstart profile-disk /dev/sda --samples 9 --json
      warmstart profile-disk /var/tmp
    """
    try:
        st = os.stat(device)
    except OSError as e:
        raise WarmstartError(f"cannot stat {device}: {e.strerror}: give a block device such as /dev/sda")
    dev = st.st_rdev if st.st_rdev else disk_of_dir(device)
    try:
        if not st.st_rdev:
            device = device_path(dev)
        check_direct(device)
    except WarmstartError as e:
        prof, how = profiler.profile_without_node(dev, devices.rotational(dev))
        pid = save_profile(ctx.db, device, dev, prof, 0.0)
        out = {"profile_id": pid, "device": device, "how": how, "why": str(e), "c_switch_s": prof.c_switch_s,
               "r_tr_Bps": prof.r_tr_Bps}
        emit(out, as_json, lambda: f"profile #{pid} of {device}: {how}\n  (its node: {out['why']})\n"
             f"  C_switch {prof.c_switch_s * 1e3:.2f} ms   R_tr {prof.r_tr_Bps / 1e6:.1f} MB/s")
        return
    with click.progressbar(length=1, label="probing", file=None if not as_json else open(os.devnull, "w")) as bar:
        def progress(done, total):
            bar.length = total
            bar.update(done - bar.pos)
        prof, took = profiler.measure(device, samples=samples, progress=progress)
    prof.strip_bytes, prof.stripe_disks = strip_size, stripe_disks
    pid = save_profile(ctx.db, device, dev, prof, took)
    out = {"profile_id": pid, "device": device, "size_bytes": prof.size_bytes, "duration_s": took,
           "c_switch_s": prof.c_switch_s, "r_tr_Bps": prof.r_tr_Bps, "overhead_s": prof.overhead_s,
           "stream_bytes": prof.stream_bytes, "gap_merge_bytes": prof.gap_merge_bytes,
           "seek_curve": prof.seek_curve, "rate_curve": prof.rate_curve}
    emit(out, as_json, lambda: "\n".join(
        [f"profile #{pid} of {device} ({prof.size_bytes / 1e9:.2f} GB) in {took:.1f} s",
         f"  C_switch {prof.c_switch_s * 1e3:.2f} ms   R_tr {prof.r_tr_Bps / 1e6:.1f} MB/s   "
         f"overhead {prof.overhead_s * 1e6:.0f} us   streams gaps <= {prof.stream_bytes / 1024:.0f} KiB",
         f"  gap merge threshold (C_switch x R_tr) {prof.gap_merge_bytes / 1024:.0f} KiB",
         "  seek curve: " + ", ".join(f"{d / 1048576:.2g}MiB:{t * 1e3:.1f}ms" for d, t in prof.seek_curve[1:])]))
