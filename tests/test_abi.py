"""The C ABI is declared once (python/recgo/_abi.py, generated from the Go sources) and checked.

The generated file must match what scripts/gen_abi.py writes from the current Go sources; a change of
an export's signature or of a constant on one side only is caught (shown here by building from
deliberately changed Go sources, and by feeding deliberately wrong declarations to the checks).
"""

from __future__ import annotations

import ctypes
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from recgo import _abi, _lib, errors
from recgo.errors import AbiError, LibraryNotFoundError

ROOT = Path(__file__).resolve().parents[1]
GEN = ROOT / "scripts" / "gen_abi.py"
needs_go = pytest.mark.skipif(shutil.which("go") is None or not (ROOT / "capi").is_dir(),
                              reason="needs Go and the source tree")

sys.path.insert(0, str(ROOT / "scripts"))
import gen_abi  # noqa: E402


def _gen(tmp_path: Path, *extra: str, out: Path | None = None) -> subprocess.CompletedProcess[str]:
    out = out or tmp_path / "_abi.py"
    if not out.exists():
        shutil.copy(ROOT / "python" / "recgo" / "_abi.py", out)
    return subprocess.run([sys.executable, str(GEN), "--check", "--out", str(out), "--cache", str(tmp_path / "build"),
                           *extra], cwd=ROOT, capture_output=True, text=True, timeout=600)


@needs_go
def test_committed_declarations_match_the_go_sources(tmp_path: Path) -> None:
    res = _gen(tmp_path)
    assert res.returncode == 0, f"recgo/_abi.py is stale:\n{res.stdout}\n{res.stderr}"


@needs_go
def test_a_go_side_change_of_a_signature_or_constant_is_caught(tmp_path: Path) -> None:
    # Build from Go sources changed on purpose (go build -overlay): recgo_debug_fail's mode becomes
    # size_t and TableMemState becomes 7; the committed declarations must then be reported stale.
    version = (ROOT / "capi" / "version.go").read_text()
    embedding = (ROOT / "capi" / "embedding.go").read_text()
    changed_v = version.replace("recgo_debug_fail(mode C.int,", "recgo_debug_fail(mode C.size_t,")
    changed_e = re.sub(r"tableMemState\s*=\s*1", "tableMemState   = 7", embedding)
    assert changed_v != version and changed_e != embedding, "the overlay no longer applies: update this test"
    (tmp_path / "version.go").write_text(changed_v)
    (tmp_path / "embedding.go").write_text(changed_e)
    overlay = tmp_path / "overlay.json"
    overlay.write_text(json.dumps({"Replace": {str(ROOT / "capi" / "version.go"): str(tmp_path / "version.go"),
                                               str(ROOT / "capi" / "embedding.go"): str(tmp_path / "embedding.go")}}))
    res = _gen(tmp_path, "--overlay", str(overlay))
    assert res.returncode == 1, res.stdout + res.stderr
    assert "-        ('mode', 'int')," in res.stdout and "+        ('mode', 'size_t')," in res.stdout, res.stdout
    assert "-    'TableMemState': 1," in res.stdout and "+    'TableMemState': 7," in res.stdout, res.stdout
    assert "is stale" in res.stderr


def test_parse_header_reads_cgo_declarations_and_refuses_unknown_types() -> None:
    header = """
typedef long long GoInt64;
extern int recgo_x(uintptr_t h, void* buf, int64_t n, int64_t* needed, char* errbuf, size_t errlen);
extern int recgo_y(void);
"""
    got = gen_abi.parse_header(header)
    assert got == {
        "recgo_x": ("int", (("h", "uintptr_t"), ("buf", "void*"), ("n", "int64_t"), ("needed", "int64_t*"),
                            ("errbuf", "char*"), ("errlen", "size_t"))),
        "recgo_y": ("int", ()),
    }
    with pytest.raises(ValueError, match="unsupported C type"):
        gen_abi.parse_header("extern int recgo_z(GoSlice s, char* errbuf, size_t errlen);")
    with pytest.raises(ValueError, match="no recgo_"):
        gen_abi.parse_header("extern int other(int x);")


def test_render_round_trips_through_python() -> None:
    ns: dict = {}
    exec(gen_abi.render(_abi.EXPORTS, _abi.CONSTANTS), ns)
    assert ns["EXPORTS"] == _abi.EXPORTS and ns["CONSTANTS"] == _abi.CONSTANTS


def test_a_wrong_call_site_declaration_raises() -> None:
    H, P, I64, I32 = _lib.H, _lib.P, _lib.I64, _lib.I32
    right = [H, P, I64, P, I64, P, I64, P, I64, P, I64, I32, I32, ctypes.POINTER(H)]
    _lib.check_argtypes("recgo_ebc_forward", right)
    _lib.check_argtypes("recgo_ebc_forward", right[:-1] + [P])  # a pointer may be declared c_void_p
    with pytest.raises(AbiError, match=r"argument 11 \(train\) is int32_t.*c_long"):
        _lib.check_argtypes("recgo_ebc_forward", right[:11] + [I64] + right[12:])
    with pytest.raises(AbiError, match="declares 13 arguments, the export takes 14"):
        _lib.check_argtypes("recgo_ebc_forward", right[:-1])
    with pytest.raises(AbiError, match=r"argument 13 \(ctxOut\) is uintptr_t\*"):
        _lib.check_argtypes("recgo_ebc_forward", right[:-1] + [ctypes.POINTER(ctypes.c_int32)])
    with pytest.raises(AbiError, match="is void\\*"):
        _lib.check_argtypes("recgo_ebc_context_counts", [H, ctypes.c_char_p, I64])
    with pytest.raises(AbiError, match="is char\\*"):
        _lib.check_argtypes("recgo_remap_load", [P, I64, ctypes.POINTER(H)])
    # Through fn(): the old form is checked before the export is touched.
    with pytest.raises(AbiError):
        _lib.fn("recgo_free", [I32])
    with pytest.raises(AbiError, match="not declared"):
        _lib.fn("recgo_no_such_export", [H])
    assert _lib.fn("recgo_free", [H]) is _lib.fn("recgo_free")


def test_a_declaration_that_disagrees_with_a_call_site_is_caught() -> None:
    # The same call site against a deliberately wrong declaration (int64 where Go takes int32).
    wrong = ("int", (("h", "uintptr_t"), ("kind", "int64_t"), ("errbuf", "char*"), ("errlen", "size_t")))
    with pytest.raises(AbiError, match=r"argument 1 \(kind\) is int64_t"):
        _lib.check_argtypes("recgo_x", [_lib.H, _lib.I32], wrong)


def test_fn_sets_the_declared_signature() -> None:
    f = _lib.fn("recgo_ebc_table_memory")
    assert f.restype is ctypes.c_int
    assert f.argtypes == [ctypes.c_size_t, ctypes.c_int64, ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p,
                          ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    assert _lib.takes_errbuf("recgo_free") and not _lib.takes_errbuf("recgo_version")


def test_library_constants_are_checked_at_load(monkeypatch: pytest.MonkeyPatch) -> None:
    loaded = _lib.lib()
    _lib._check_constants(loaded, _lib.library_path())  # the built library agrees
    wrong = dict(_abi.CONSTANTS, TableMemState=7)
    monkeypatch.setattr(_abi, "CONSTANTS", wrong)
    with pytest.raises(LibraryNotFoundError, match="TableMemState"):
        _lib._check_constants(loaded, _lib.library_path())


def test_const_reads_the_generated_table() -> None:
    assert _lib.const("CodeInvalid") == _abi.CONSTANTS["CodeInvalid"]
    with pytest.raises(AbiError, match="no C ABI constant 'NoSuch'"):
        _lib.const("NoSuch")


def test_error_codes_come_from_the_abi() -> None:
    codes = {v for k, v in _abi.CONSTANTS.items() if k.startswith("Code") and k != "CodeOK"}
    assert set(errors.CODE_TO_ERROR) == codes
    assert errors.error_for_code(_lib.const("CodeCapacity")) is errors.CapacityError
    assert errors.error_for_code(12345) is errors.InternalError
    with pytest.raises(errors.InvalidInputError, match="was rejected"):
        _lib.call(_lib.fn("recgo_debug_fail"), 0)


def test_call_json_reads_a_document_larger_than_the_first_buffer(monkeypatch: pytest.MonkeyPatch) -> None:
    full = _lib.call_json("recgo_abi_constants")
    assert {c["name"]: c["value"] for c in full} == _abi.CONSTANTS
    monkeypatch.setattr(_lib, "_JSON_FIRST", 16)  # far smaller than the document: the retry must run
    assert _lib.call_json("recgo_abi_constants") == full


_NAME_USE = re.compile(r"""(?:fn|new_handle|call_json|_doc)\(\s*["'](recgo_\w+)["']""")
_CONST_USE = re.compile(r"""const\(\s*["'](\w+)["']\s*\)""")


def test_every_export_and_constant_python_names_is_declared() -> None:
    names, consts = set(), set()
    for p in (ROOT / "python" / "recgo").rglob("*.py"):
        text = p.read_text()
        names |= set(_NAME_USE.findall(text))
        consts |= set(_CONST_USE.findall(text))
    assert names, "the scan found no call sites"
    assert not names - set(_abi.EXPORTS), names - set(_abi.EXPORTS)
    assert not consts - set(_abi.CONSTANTS), consts - set(_abi.CONSTANTS)


def test_fn_and_call_are_safe_from_many_threads_at_once() -> None:
    from concurrent.futures import ThreadPoolExecutor

    def work(i: int) -> str:
        out = []
        for _ in range(50):
            f = _lib.fn("recgo_debug_fail", [ctypes.c_int]) if i % 2 else _lib.fn("recgo_debug_fail")
            try:
                _lib.call(f, 0 if i % 3 else 99)
            except errors.RecgoError as e:
                out.append(type(e).__name__ + ":" + str(e)[:20])
        return "|".join(sorted(set(out)))

    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(work, range(16)))
    for i, g in enumerate(got):  # each thread saw only its own error (per-thread error buffers)
        assert g == ("InvalidInputError:debug_fail: the argu" if i % 3 else "InternalError:debug_fail: unknown "), (i, g)


def test_no_call_site_writes_its_own_argtypes() -> None:
    """Signatures live in _abi.py only: no module passes argtypes to fn()/new_handle()."""
    import re
    from pathlib import Path

    root = Path(_lib.__file__).parent
    pattern = re.compile(r'\b(?:fn|new_handle)\(\s*"recgo_\w+"\s*,\s*\[')
    offenders = [str(p.relative_to(root)) for p in root.rglob("*.py") if pattern.search(p.read_text())]
    assert offenders == []
