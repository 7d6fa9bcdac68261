"""The .wsched portable schedule: a schedule keyed by file identity, not by LBA. Python only
(warmstart/portable/format.py writes and reads it; no C reads it), so no C header is generated.

    header   56 bytes  magic "WSCHED\\r\\n" ("\\r\\n" catches text-mode mangling), version, header
                       size, payload length and CRC-32, section sizes, header CRC-32 (with that
                       field 0)
    payload  meta      UTF-8 JSON: app name, argv, algorithm, source machine, counts
             files     FILE each
             segments  SEGMENT each
             ranges    RANGE each (file order of fetch)
             strtab    raw bytes: paths and the executable (no encoding assumed: bytes on Linux)
"""

from . import Field, Record

MAGIC = b"WSCHED\r\n"
VERSION = 1

HEADER = Record("HEADER", 56,
                Field("magic", "8s"),
                Field("version", "I"),
                Field("header_size", "I"),
                Field("payload_len", "Q"),
                Field("payload_crc32", "I"),
                Field("meta_len", "I"),
                Field("nfiles", "I"),
                Field("nsegments", "I"),
                Field("nranges", "I"),
                Field("strtab_len", "I"),
                Field("reserved", "I"),
                Field("header_crc32", "I"))
FILE = Record("FILE", 48,
              Field("path_off", "I", "into the string table"),
              Field("path_len", "I"),
              Field("size", "Q"),
              Field("sha256", "32s", "content_hash() of the file's scheduled ranges"))
SEGMENT = Record("SEGMENT", 48,
                 Field("idx", "I"),
                 Field("first_p", "I"),
                 Field("last_p", "I"),
                 Field("first_range", "I"),
                 Field("nranges", "I"),
                 Field("dropped_device_ranges", "I", "metadata ranges not carried (LBAs are per machine)"),
                 Field("cpu_s", "d"),
                 Field("t_disk_s", "d", "at the source (re-modelled on import)"),
                 Field("dropped_device_bytes", "Q"))
RANGE = Record("RANGE", 24,
               Field("file_no", "I"),
               Field("pad", "4x"),
               Field("offset", "Q", "bytes into the file"),
               Field("length", "Q"))
