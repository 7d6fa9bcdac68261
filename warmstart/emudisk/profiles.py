"""The disk profiles an emulated disk can have, and what the kernel should believe about each.

A profile with a `model` runs hddsim (the FUSE disk model) between the loop device and the image;
"none" attaches the loop device straight to the tmpfs image (no delay, for fast logic tests).
"""

from dataclasses import dataclass
from typing import Optional

from ..errors import WarmstartError

# The hdd7200 drive a `system` image is a partition of: 1 TB, the image at its outer edge.
MODELED_DRIVE_BYTES = 1_000_000_000_000
# A system disk's data is a slice of a bigger drive; seeks scale with the drive, not the image.
SYSTEM_STROKE_FACTOR = 10


@dataclass(frozen=True)
class Profile:
    name: str
    model: Optional[str]       # hddsim --profile, or None for a plain loop device
    rotational: bool
    scheduler: str


PROFILES = {
    "hdd7200": Profile("hdd7200", "hdd7200", rotational=True, scheduler="mq-deadline"),
    "ssd": Profile("ssd", "ssd", rotational=False, scheduler="none"),
    "none": Profile("none", None, rotational=False, scheduler="none"),
}


def get(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise WarmstartError(f"unknown disk profile {name!r}: use one of {', '.join(PROFILES)}")


def default_stroke(image: str, image_bytes: int) -> int:
    """Seek stroke in bytes: the image itself (full stroke, also the random-layout system image),
    or for the packaged `system` image a 10x larger drive (capped at 1 TB)."""
    if image == "system":
        return min(SYSTEM_STROKE_FACTOR * image_bytes, MODELED_DRIVE_BYTES)
    return image_bytes
