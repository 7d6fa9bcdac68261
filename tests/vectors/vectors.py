#!/usr/bin/env python3
"""The shared test vectors of the binary formats (tests/vectors/FORMAT.json + the files it names).

A manifest lists vectors. A vector either has `contents` (the decoded values, as the readers
see them) that the Python writer turns into the file's bytes, or is `from` another vector with
an edit (`truncate_to`: keep that many bytes, negative from the end; `xor`: [[offset, mask]]).
`rejected` says why the readers refuse it: `c` (a substring of the C reader's reason, or the
errno name it returns) and `python` (of the Python reader's; null when the Python side makes
no such check). Byte strings (paths, argv) are JSON strings whose non-UTF-8 bytes are written
as \\udcXX (Python's surrogateescape).

    python3 tests/vectors/vectors.py write      rewrite the vector files (after a deliberate
                                                format change, with its VERSION bumped)
    python3 tests/vectors/vectors.py c FORMAT   the C tests' expectations (build/gen/FORMAT_vectors.h)

tests/test_formats.py checks the Python writer makes exactly the committed bytes; the C tests
(replayer/test_format.c, launchd-hook/test_index.c) check the C readers decode them to
`contents` and refuse the rejected ones.
"""

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

FORMATS = ("wsr", "hook_index", "wsched")


def raw(s: str) -> bytes:
    return s.encode("utf-8", "surrogateescape")


def manifest(fmt: str) -> dict:
    return json.loads((HERE / f"{fmt}.json").read_text())


def wsr_contents(c: dict):
    from warmstart.formats import wsr
    return wsr.WsrContents(c["schedule_id"],
                           [wsr.WsrFile(raw(f["path"]), f["dev"], f["ino"], f["size"], f["mtime_ns"],
                                        {"file": wsr.KIND_FILE, "blockdev": wsr.KIND_BLOCKDEV, "dir": wsr.KIND_DIR}[f["kind"]],
                                        f.get("flags", 0), f.get("meta_pos", 0), f.get("step_segment", 0))
                            for f in c["files"]],
                           [wsr.WsrSegment(**s) for s in c["segments"]],
                           [wsr.WsrRange(**r) for r in c["ranges"]])


def index_contents(c: dict):
    from warmstart.hook.index import Index, IndexEntry
    return Index(entries=[IndexEntry(**dict(e, exe=raw(e["exe"]), schedule=raw(e["schedule"]),
                                            needles=tuple(map(raw, e["needles"])), files=tuple(map(raw, e["files"]))))
                          for e in c["entries"]],
                 max_hold_ms=c["max_hold_ms"])


def wsched_contents(c: dict):
    from warmstart.portable.format import PFile, PRange, PSegment, Portable
    return Portable(c["app_name"], raw(c["executable"]), [raw(a) for a in c["argv"]],
                    [PFile(raw(f["path"]), f["size"], bytes.fromhex(f["sha256"])) for f in c["files"]],
                    [PSegment(**dict(s, ranges=[PRange(*r) for r in s["ranges"]])) for s in c["segments"]],
                    c["meta"])


def contents(fmt: str, vector: dict):
    """The writer's input (= the reader's output) a vector describes."""
    return {"wsr": wsr_contents, "hook_index": index_contents, "wsched": wsched_contents}[fmt](vector["contents"])


def encode(fmt: str, vector: dict, vectors: dict) -> bytes:
    """The bytes a vector's file must hold, made by the Python writer (and the vector's edit)."""
    if "from" in vector:
        data = bytearray(encode(fmt, vectors[vector["from"]], vectors))
        if "truncate_to" in vector:
            del data[vector["truncate_to"]:]
        for at, mask in vector.get("xor", ()):
            data[at] ^= mask
        return bytes(data)
    if fmt == "wsr":
        from warmstart.formats.wsr import encode as write
    elif fmt == "hook_index":
        from warmstart.hook.index import encode as write
    else:
        from warmstart.portable.format import encode as write
    return write(contents(fmt, vector))


def by_file(fmt: str) -> dict:
    return {v["file"]: v for v in manifest(fmt)["vectors"]}


def write() -> None:
    for fmt in FORMATS:
        vectors = by_file(fmt)
        for name, v in vectors.items():
            (HERE / name).write_bytes(encode(fmt, v, vectors))
            print(f"wrote tests/vectors/{name}")


# ---- the C tests' expectations ------------------------------------------------------------------

def c_string(b: bytes) -> str:
    from warmstart.formats.cheader import c_string as literal
    return literal(b)


def c_array(ctype: str, items) -> str:
    items = list(items)
    if not items:
        return "NULL"
    return f"(const {ctype}[]){{\n\t\t" + ",\n\t\t".join(items) + "\n\t}"


def c_wsr(vectors: dict) -> str:
    out = ["struct wsr_vector {", "\tconst char *file;", "\tconst char *rejected; /* why the reader refuses it, or NULL */",
           "\tuint64_t schedule_id;", "\tuint32_t nfiles, nsegments, nranges;", "\tconst struct wsr_file *files;",
           "\tconst struct wsr_segment *segments;", "\tconst struct wsr_range *ranges;", "};", "",
           "static const struct wsr_vector wsr_vectors[] = {"]
    for name, v in vectors.items():
        rejected = v.get("rejected")
        if rejected:
            out.append(f"\t{{ .file = {c_string(name.encode())}, .rejected = {c_string(rejected['c'].encode())} }},")
            continue
        c = v["contents"]
        files = (f"{{ .dev = {f['dev']}ull, .ino = {f['ino']}ull, .size = {f['size']}ull, .mtime_ns = {f['mtime_ns']}ll, "
                 f".path = {c_string(raw(f['path']))}, .path_len = {len(raw(f['path']))}, "
                 f".kind = WSR_KIND_{'BLOCKDEV' if f['kind'] == 'blockdev' else f['kind'].upper()}, .flags = {f.get('flags', 0)}u, .meta_pos = {f.get('meta_pos', 0)}ull, "
                 f".step_segment = {f.get('step_segment', 0)}u }}"
                 for f in c["files"])
        segs = (f"{{ .idx = {s['idx']}u, .first_range = {s['first_range']}u, .nranges = {s['nranges']}u, "
                f".bytes = {s['bytes']}ull, .cpu_ns = {s['cpu_ns']}ull }}" for s in c["segments"])
        ranges = (f"{{ .offset = {r['offset']}ull, .length = {r['length']}ull, .sector = {r['sector']}ull, "
                  f".file_no = {r['file_no']}u, .orig_pos = {r['orig_pos']}u, .segment = {r['segment']}u }}"
                  for r in c["ranges"])
        out.append(f"\t{{ .file = {c_string(name.encode())}, .schedule_id = {c['schedule_id']}ull, "
                   f".nfiles = {len(c['files'])}, .nsegments = {len(c['segments'])}, .nranges = {len(c['ranges'])},\n"
                   f"\t.files = {c_array('struct wsr_file', files)},\n"
                   f"\t.segments = {c_array('struct wsr_segment', segs)},\n"
                   f"\t.ranges = {c_array('struct wsr_range', ranges)} }},")
    out.append("};")
    return "\n".join(out)


def c_hook_index(vectors: dict) -> str:
    out = ["struct idx_vector_entry {", "\tuint64_t dev, ino, size;", "\tint64_t mtime_ns;", "\tuint64_t schedule_id;",
           "\tconst char *exe, *argv, *sched, *name, *files; /* argv, files: NUL-separated */",
           "\tuint32_t exe_len, argv_len, sched_len, name_len, files_len;", "\tuint32_t hold_ms, flags, owner_uid;", "};", "",
           "struct idx_vector {", "\tconst char *file;", "\tint rejected; /* the -errno the reader returns, or 0 */",
           "\tuint32_t max_hold_ms, n_entries;", "\tconst struct idx_vector_entry *entries;", "};", "",
           "static const struct idx_vector idx_vectors[] = {"]
    for name, v in vectors.items():
        rejected = v.get("rejected")
        if rejected:
            out.append(f"\t{{ .file = {c_string(name.encode())}, .rejected = -{rejected['c']} }},")
            continue
        c = v["contents"]
        entries = []
        for e in c["entries"]:
            strings = {"exe": raw(e["exe"]), "argv": b"\0".join(map(raw, e["needles"])), "sched": raw(e["schedule"]),
                       "name": e["name"].encode(), "files": b"\0".join(map(raw, e["files"]))}
            flags = " | ".join([f for f, on in (("WS_ENTRY_STALE", e.get("stale")), ("WS_ENTRY_LAUNCHER", e.get("launcher")))
                                if on]) or "0"
            entries.append(f"{{ .dev = {e['dev']}ull, .ino = {e['ino']}ull, .size = {e['size']}ull, "
                           f".mtime_ns = {e['mtime_ns']}ll, .schedule_id = {e['schedule_id']}ull, "
                           + ", ".join(f".{k} = {c_string(b)}, .{k}_len = {len(b)}" for k, b in strings.items())
                           + f", .hold_ms = {e['hold_ms']}u, .flags = {flags}, .owner_uid = {e.get('owner_uid', 0)}u }}")
        out.append(f"\t{{ .file = {c_string(name.encode())}, .max_hold_ms = {c['max_hold_ms']}u, "
                   f".n_entries = {len(c['entries'])},\n\t.entries = {c_array('struct idx_vector_entry', entries)} }},")
    out.append("};")
    return "\n".join(out)


def c_header(fmt: str) -> str:
    body = {"wsr": c_wsr, "hook_index": c_hook_index}[fmt](by_file(fmt))
    return (f"/* Generated from tests/vectors/{fmt}.json by tests/vectors/vectors.py: do not edit. */\n"
            f"#include <errno.h>\n#include <stddef.h>\n#include <stdint.h>\n\n{body}\n")


def main(argv) -> int:
    if argv == ["write"]:
        write()
    elif len(argv) == 2 and argv[0] == "c" and argv[1] in ("wsr", "hook_index"):
        sys.stdout.write(c_header(argv[1]))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
