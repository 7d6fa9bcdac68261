"""The binary formats shared between Python and C are defined once (warmstart/formats/) and pinned
by shared test vectors (tests/vectors/): here the Python writers must make exactly the committed
bytes and the Python readers must decode or refuse them as described; replayer/test_format.c and
launchd-hook/test_index.c (`make ctest`) hold the C readers to the same files."""

import subprocess
import sys

import pytest

from conftest import REPO
from warmstart.errors import WarmstartError
from warmstart.formats import Field, Record, cheader

sys.path.insert(0, str(REPO / "tests" / "vectors"))
import vectors  # noqa: E402

CASES = [(fmt, name) for fmt in vectors.FORMATS for name in vectors.by_file(fmt)]


@pytest.mark.parametrize("fmt,name", CASES)
def test_python_writer_makes_the_committed_bytes(fmt, name):
    all_ = vectors.by_file(fmt)
    made = vectors.encode(fmt, all_[name], all_)
    committed = (vectors.HERE / name).read_bytes()
    assert made == committed, (f"the Python writer no longer makes tests/vectors/{name}: the {fmt} format "
                               f"changed; if meant, bump its VERSION and run `python3 tests/vectors/vectors.py write`")


def _read(fmt, data):
    """The Python reader's verdict: decoded contents, or the reason it refuses."""
    if fmt == "wsr":
        from warmstart.formats.wsr import verify
        why = verify(data)
        if why:
            raise WarmstartError(why)
        return None                     # the Python side only checks exports, the C side decodes them
    if fmt == "hook_index":
        from warmstart.hook.index import decode
        return decode(data)
    from warmstart.portable.format import decode
    return decode(data)


@pytest.mark.parametrize("fmt,name", CASES)
def test_python_reader_agrees_with_the_vector(fmt, name):
    v = vectors.by_file(fmt)[name]
    data = (vectors.HERE / name).read_bytes()
    why = (v.get("rejected") or {}).get("python")
    if why:
        with pytest.raises(WarmstartError, match=why):
            _read(fmt, data)
        return
    decoded = _read(fmt, data)
    if decoded is not None:
        assert decoded == vectors.contents(fmt, v)


def test_vectors_cover_the_edges():
    """Every format has an empty, a truncated and a corrupt vector; the C-read ones a rejected one
    the C reader must refuse on its own checks (checksums right)."""
    for fmt in vectors.FORMATS:
        names = vectors.by_file(fmt)
        assert {n.split(".")[0] for n in names} >= {"basic", "empty", "truncated", "corrupt"}, fmt
    assert any(v.get("rejected") and "contents" in v for v in vectors.by_file("wsr").values())


def test_generated_c_headers_match_the_definitions():
    """The C headers come from the definitions: the record sizes and offsets in them are the
    Python struct's, and the generator runs as the Makefile runs it."""
    from warmstart.formats import hook_index, wsr
    for mod in (wsr, hook_index):
        text = subprocess.run([sys.executable, "-m", "warmstart.formats.cheader", mod.FORMAT.name], cwd=REPO,
                              capture_output=True, text=True, check=True).stdout
        assert text == cheader.header(mod.FORMAT)
        for r in mod.FORMAT.records:
            assert f"#define {mod.FORMAT.c_prefix}_{r.name}_SIZE {r.struct.size}\n" in text
            for f in r.fields:
                off, width = r.offsets[f.name]
                assert r.struct.size >= off + width
                assert f"_{r.name}_{f.name.upper()}_OFF {off}" in text
    assert '#define WS_INDEX_MAGIC "WSHOOKIX"' in cheader.header(hook_index.FORMAT)
    assert "uint64_t checksum;" in cheader.header(hook_index.FORMAT)


def test_record_packs_by_name_and_refuses_a_missing_field():
    r = Record("T", 16, Field("a", "I"), Field("pad", "4x"), Field("b", "q"))
    assert r.offsets == {"a": (0, 4), "pad": (4, 4), "b": (8, 8)}
    assert r.unpack(r.pack(b=-2, a=7)) == {"a": 7, "b": -2}
    with pytest.raises(TypeError, match=r"missing \['b'\]"):
        r.pack(a=1)
    with pytest.raises(AssertionError, match="declared 12"):
        Record("U", 12, Field("a", "Q"), Field("b", "Q"))
