"""The C ABI's contract: the library loads, errors map to exceptions, panics never kill the process."""

from __future__ import annotations

import threading

import pytest

import recgo
from recgo import _lib
from recgo.errors import InternalError, InvalidInputError


def test_version_matches_package() -> None:
    assert recgo.library_version() == recgo.__version__


def test_num_threads_positive() -> None:
    assert recgo.num_threads() >= 1


def test_set_num_threads_round_trip_and_results_unchanged() -> None:
    """set_num_threads changes the count num_threads reports, and a parallel kernel gives the same
    values on one worker as on several."""
    import torch

    before = recgo.num_threads()
    ebc = recgo.EmbeddingBagCollection([recgo.EmbeddingBagConfig(1000, 16, "t", ["f"])], seed=3)
    kjt = recgo.KeyedJaggedTensor(["f"], torch.randint(0, 1000, (4096,)), lengths=torch.full((512,), 8))

    def off_main(n: int) -> torch.Tensor:
        # off the main thread the kernels run on Go's workers, the ones set_num_threads sizes
        recgo.set_num_threads(n)
        assert recgo.num_threads() == n
        got: list[torch.Tensor] = []
        t = threading.Thread(target=lambda: got.append(ebc(kjt).values()))
        t.start()
        t.join()
        return got[0]

    try:
        many, one = off_main(3), off_main(1)
    finally:
        recgo.set_num_threads(before)
    assert recgo.num_threads() == before
    assert torch.equal(many, one)


@pytest.mark.parametrize("bad", [0, -2, 1.5, "2", True, None])
def test_set_num_threads_rejects_bad_counts(bad: object) -> None:
    before = recgo.num_threads()
    with pytest.raises(InvalidInputError, match="at least 1"):
        recgo.set_num_threads(bad)  # type: ignore[arg-type]
    assert recgo.num_threads() == before


@pytest.mark.parametrize("huge", [100_000, 2**31, 2**70])
def test_set_num_threads_refuses_counts_past_its_bound(huge: int) -> None:
    """A count far past the machine's CPUs is refused, naming the bound (10^5 goroutines took seconds to
    set and gigabytes, and the next parallel call never finished)."""
    before = recgo.num_threads()
    with pytest.raises(InvalidInputError, match=r"must be in \[1, \d+\]"):
        recgo.set_num_threads(huge)
    assert recgo.num_threads() == before


def test_set_num_threads_engine_checks_too() -> None:
    """The C entry point validates on its own, for callers other than the Python package."""
    with pytest.raises(InvalidInputError, match=r"must be in \[1, "):
        _lib.call(_lib.fn("recgo_set_num_threads"), 0)


def _debug_fail(mode: int) -> None:
    _lib.call(_lib.fn("recgo_debug_fail"), mode)


def test_error_becomes_named_exception() -> None:
    with pytest.raises(InvalidInputError, match="was rejected"):
        _debug_fail(0)


@pytest.mark.parametrize("mode", [1, 2])
def test_panic_becomes_exception_and_process_lives(mode: int) -> None:
    with pytest.raises(InternalError, match="internal error"):
        _debug_fail(mode)
    # the library still answers afterwards
    assert recgo.library_version() == recgo.__version__
    with pytest.raises(InvalidInputError):
        _debug_fail(0)


def test_freed_handle_is_an_error_not_a_crash() -> None:
    with pytest.raises(InvalidInputError, match="not live"):
        _lib.call(_lib.fn("recgo_free"), 123456789)


def test_missing_library_message(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setattr(_lib, "_lib", None)
    monkeypatch.setenv("RECGO_LIBRARY", str(tmp_path / "nope.so"))
    with pytest.raises(recgo.LibraryNotFoundError, match="not found"):
        _lib.lib()


def test_wrong_platform_library_message(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    bogus = tmp_path / "librecgo.so"
    bogus.write_bytes(b"\x7fELF not really a library")
    monkeypatch.setattr(_lib, "_lib", None)
    monkeypatch.setenv("RECGO_LIBRARY", str(bogus))
    with pytest.raises(recgo.LibraryNotFoundError, match="another platform"):
        _lib.lib()


@pytest.mark.parametrize("dim", [0, 2**20 + 1, 2**40])
def test_embedding_dim_limit_comes_from_the_engine(dim: int) -> None:
    # Python checks only the type and sign; the range rule is the engine's (embedding.CheckDim).
    cfg = recgo.EmbeddingBagConfig(name="t", embedding_dim=dim, num_embeddings=2, feature_names=["f"])
    with pytest.raises(InvalidInputError, match=r"embedding_dim"):
        recgo.EmbeddingBagCollection(tables=[cfg])


@pytest.mark.parametrize("dim", [2**20 + 1, 2**40])
def test_dynamic_table_dim_limit_is_checked_before_reserving_rows(dim: int) -> None:
    cfg = recgo.EmbeddingBagConfig(name="t", embedding_dim=dim, num_embeddings=2, feature_names=["f"],
                                   dynamic=recgo.DynamicConfig())
    with pytest.raises(InvalidInputError, match=r"table \"t\": embedding_dim \d+ must be in \[1, 1048576\]"):
        recgo.EmbeddingBagCollection(tables=[cfg])


def test_loading_library_of_other_sources_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from recgo import _abi

    monkeypatch.setattr(_abi, "CONSTANTS", dict(_abi.CONSTANTS, CodeInvalid=7))
    monkeypatch.setattr(_lib, "_lib", None)
    with pytest.raises(recgo.LibraryNotFoundError, match="other sources.*CodeInvalid"):
        _lib.lib()
