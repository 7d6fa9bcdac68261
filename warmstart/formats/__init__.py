"""The binary formats warmstart writes, each defined once (STYLE habit 10).

A format module (wsr.py, hook_index.py, wsched.py) declares its magic, version, constants and
records here as data; the Python writers and readers pack and unpack through those records, and
`python3 -m warmstart.formats.cheader FORMAT` generates the C header the C readers include
(build/gen/*_layout.h, a Makefile rule), so a field cannot change on one side only. The shared
test vectors in tests/vectors/ pin the bytes: both the Python writer and the C reader are tested
against them.

This package is shared: it imports no stage (tests/test_layout.py).
"""

import struct
import zlib
from typing import Dict, NamedTuple, Optional, Tuple


class Field(NamedTuple):
    """One field of a record: its name (C and Python), its struct code ("Q", "q", "I", "d",
    "8s", or "4x" for padding) and what it means (a comment in the C header)."""
    name: str
    code: str
    doc: str = ""

    @property
    def padding(self) -> bool:
        return self.code.endswith("x")


class Record:
    """A fixed-size little-endian record: the fields in order, their struct format, offsets."""

    def __init__(self, name: str, size: int, *fields: Field, doc: str = "", c_struct: Optional[str] = None):
        self.name = name                # C macro stem: WSR_ + "HEADER" + _SIZE / _<FIELD>_OFF
        self.fields = fields
        self.doc = doc
        self.c_struct = c_struct        # also emitted as a C struct of this name (readers that map it)
        self.struct = struct.Struct("<" + "".join(f.code for f in fields))
        if self.struct.size != size:
            raise AssertionError(f"record {name}: fields make {self.struct.size} bytes, declared {size}")
        self.size = size
        self.names = tuple(f.name for f in fields if not f.padding)
        self.offsets: Dict[str, Tuple[int, int]] = {}
        at = 0
        for f in fields:
            width = struct.calcsize("<" + f.code)
            self.offsets[f.name] = (at, width)
            at += width

    def pack(self, **values) -> bytes:
        """The record's bytes from every non-padding field by name (no field left out)."""
        if len(values) != len(self.names):
            missing, extra = set(self.names) - set(values), set(values) - set(self.names)
            raise TypeError(f"record {self.name}: missing {sorted(missing)}, unknown {sorted(extra)}")
        return self.struct.pack(*[values[n] for n in self.names])

    def unpack(self, buf, offset: int = 0) -> dict:
        """The record at `offset` of `buf` as {field name: value}."""
        return dict(zip(self.names, self.struct.unpack_from(buf, offset)))

    def pack_crc(self, crc_field: str, **values) -> bytes:
        """pack() with crc_field set to the zlib CRC-32 of the record packed with that field 0."""
        values[crc_field] = 0
        values[crc_field] = zlib.crc32(self.pack(**values))
        return self.pack(**values)

    def crc_ok(self, values: dict, crc_field: str) -> bool:
        """Whether unpacked values carry the CRC-32 that pack_crc(crc_field) writes."""
        return zlib.crc32(self.pack(**dict(values, **{crc_field: 0}))) == values[crc_field]


class Format(NamedTuple):
    """What the C header of a format carries: its prefix, constants and records."""
    name: str                       # "wsr" -> build/gen/wsr_layout.h
    c_prefix: str                   # macro prefix of the records: WSR_HEADER_SIZE
    doc: str
    constants: Dict[str, object]    # C name -> value (int or bytes; the Python constants themselves)
                                    # or (value, what it means)
    records: Tuple[Record, ...]
