"""Generate the C header of a format from its definition: `python3 -m warmstart.formats.cheader
wsr|hook_index` prints it (the Makefile writes it to build/gen/FORMAT_layout.h).

Per record REC of a format with prefix P: P_REC_SIZE, and per field F: P_REC_F_OFF and P_REC_F_LEN
(byte offset and width, for a reader that decodes little-endian fields itself), plus, for a
record with a c_struct name, the struct (for a reader that maps the file) with static assertions
of its size and of every field's offset.
"""

import sys
from importlib import import_module

from . import Format, Record

_C_TYPES = {"Q": "uint64_t", "q": "int64_t", "I": "uint32_t", "i": "int32_t", "H": "uint16_t", "h": "int16_t",
            "B": "uint8_t", "b": "int8_t", "d": "double"}
FORMATS = ("wsr", "hook_index")


def c_string(value: bytes) -> str:
    """A C string literal of exactly these bytes (octal escapes: no hex run-on into the next)."""
    return '"' + "".join(chr(b) if 0x20 <= b < 0x7f and b not in b'"\\?' else "\\%03o" % b for b in value) + '"'


def _literal(value) -> str:
    if isinstance(value, bytes):
        return c_string(value)
    return f"{value}u" if value < 1 << 32 else f"{value}ull"


def _comment(doc: str) -> str:
    return f" /* {doc} */" if doc else ""


def _struct(prefix: str, r: Record):
    lines = [f"struct {r.c_struct} {{"]
    for f in r.fields:
        count = f.code[:-1]
        if f.padding or f.code.endswith("s"):
            kind = "unsigned char" if f.padding else "char"
            lines.append(f"\t{kind} {f.name}[{count}];{_comment(f.doc)}")
        else:
            lines.append(f"\t{_C_TYPES[f.code]} {f.name};{_comment(f.doc)}")
    lines.append("};")
    lines.append(f"_Static_assert(sizeof(struct {r.c_struct}) == {prefix}_{r.name}_SIZE, "
                 f"\"struct {r.c_struct} has padding the format does not\");")
    for f in r.fields:
        lines.append(f"_Static_assert(offsetof(struct {r.c_struct}, {f.name}) == {prefix}_{r.name}_{f.name.upper()}_OFF, "
                     f"\"{r.c_struct}.{f.name}\");")
    return lines


def header(fmt: Format) -> str:
    guard = f"WS_GEN_{fmt.name.upper()}_LAYOUT_H"
    out = [f"/* Generated from warmstart/formats/{fmt.name}.py by warmstart/formats/cheader.py: do not edit;",
           " * change the format there (and its VERSION, and the vectors in tests/vectors/).",
           " *", *[f" * {line}".rstrip() for line in fmt.doc.splitlines()], " */",
           f"#ifndef {guard}", f"#define {guard}", "", "#include <stddef.h>", "#include <stdint.h>", ""]
    for name, value in fmt.constants.items():
        value, doc = value if isinstance(value, tuple) else (value, "")
        out.append(f"#define {name} {_literal(value)}{_comment(doc)}")
    for r in fmt.records:
        out += ["", f"#define {fmt.c_prefix}_{r.name}_SIZE {r.size}"]
        for f in r.fields:
            off, width = r.offsets[f.name]
            stem = f"{fmt.c_prefix}_{r.name}_{f.name.upper()}"
            out.append(f"#define {stem}_OFF {off}{_comment(f.doc)}")
            out.append(f"#define {stem}_LEN {width}")
        if r.c_struct:
            out += [""] + _struct(fmt.c_prefix, r)
    out += ["", f"#endif /* {guard} */", ""]
    return "\n".join(out)


def main(argv) -> int:
    if len(argv) != 1 or argv[0] not in FORMATS:
        print(f"usage: python3 -m warmstart.formats.cheader {{{'|'.join(FORMATS)}}}", file=sys.stderr)
        return 2
    sys.stdout.write(header(import_module(f"{__package__}.{argv[0]}").FORMAT))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
