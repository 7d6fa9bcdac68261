"""`scripts/emu-disk up|down|stats|reset`: bring emulated disks up and down by hand.

Thin: parses options, calls warmstart.emudisk, prints (text, or JSON with --json).
"""

import json

import click

from .disk import IMAGES, EmuDisk
from .image import FILE_SYSTEMS

name_option = click.option("--name", default="emu", show_default=True, help="Disk name (state in /run/warmstart-emu/NAME).")
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")


def _describe(d: EmuDisk) -> dict:
    return {"name": d.name, "profile": d.profile, "image": d.image, "mountpoint": str(d.mountpoint),
            "loop_dev": d.loop_dev, "dev": d.dev, "stroke_bytes": d.stroke_bytes, "size_mb": d.size_mb, "fs": d.fs}


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main():
    """Emulated disks: ext4, XFS or btrfs on a loop device whose requests go through a disk model (hddsim).

    \b
    Examples:
      scripts/emu-disk up --name demo --profile hdd7200 --image empty --size-mb 512
      scripts/emu-disk up --name sys --image system     # aged Debian image, runnable via chroot
      scripts/emu-disk up --name sysx --image system-random --fs xfs
      scripts/emu-disk stats --name demo --json
      scripts/emu-disk down --name demo
    """


@main.command()
@name_option
@click.option("--profile", type=click.Choice(["hdd7200", "ssd", "none"]), default="hdd7200", show_default=True)
@click.option("--image", type=click.Choice(IMAGES), default="empty", show_default=True,
              help="system: the packaged layout; system-random: every file in random order, full stroke.")
@click.option("--size-mb", type=int, default=512, show_default=True)
@click.option("--fs", type=click.Choice(FILE_SYSTEMS), default="ext4", show_default=True,
              help="File system of the image (empty or system).")
@click.option("--stroke-bytes", type=int, default=None,
              help="Seek stroke of the modelled drive (default: the image; system: 10x the image).")
@click.option("--fresh", is_flag=True, help="Rebuild even if a healthy disk of that name is up.")
@click.option("--model-arg", "model_args", multiple=True, help="Extra hddsim option, e.g. --model-arg=--rpm=5400.")
@json_option
def up(name, profile, image, size_mb, fs, stroke_bytes, fresh, model_args, as_json):
    """Create (or reuse) the disk NAME and mount it; cleans up leftovers of a crashed run first.

    \b
    Example:
      scripts/emu-disk up --name demo --profile hdd7200 --size-mb 512
    """
    d = EmuDisk.up(name=name, profile=profile, image=image, size_mb=size_mb, fs=fs, stroke_bytes=stroke_bytes,
                   fresh=fresh, hddsim_args=model_args,
                   progress=None if as_json else (lambda msg: click.echo(msg, err=True)))
    _emit(_describe(d), as_json, f"{d.name}: {d.profile} {d.image} {d.fs} on {d.loop_dev} mounted at {d.mountpoint}")


@main.command()
@name_option
@json_option
def down(name, as_json):
    """Unmount and tear down the disk NAME (fine if it is already down).

    \b
    Example:
      scripts/emu-disk down --name demo
    """
    EmuDisk.down_by_name(name)
    _emit({"name": name, "down": True}, as_json, f"{name}: down")


@main.command()
@name_option
@click.option("--reset", is_flag=True, help="Zero the counters after printing them.")
@json_option
def stats(name, reset, as_json):
    """Requests, seeks, bytes and busy time that reached the disk model.

    \b
    Example:
      scripts/emu-disk stats --name demo --reset
    """
    d = EmuDisk.attach(name)
    s = dict(d.stats(), **d.model_info())
    if reset:
        d.reset_stats()
    _emit(s, as_json, "\n".join(f"{k} {v}" for k, v in s.items()))


def _emit(obj, as_json, text):
    click.echo(json.dumps(obj, indent=2, sort_keys=True) if as_json else text)


def entry():
    from ..cli import run_click
    run_click(main, "emu-disk")


if __name__ == "__main__":
    entry()
