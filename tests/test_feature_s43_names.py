"""One name rule for the feature engine and the embedding configs.

The feature engine refused every non-printable character in a name (Go's ``unicode.IsPrint``, the
classes of ``str.isprintable``); the embedding configs refused only ASCII control characters, so a
line separator, zero-width space, byte order mark, bidirectional override or no-break space passed
as a table or feature name. And a collection sharing another's tables (``EmbeddingCollection(...,
share=ebc)``) checked its feature names not at all: a NUL, an empty name or an ``@`` passed. Both now
use :func:`recgo.feature.spec.check_name`, the engine's rule in the engine's words.
"""

from __future__ import annotations

import pytest

import recgo
from recgo.feature import Feature, FeatureEngine
from recgo.feature.spec import check_name

_BAD = ["a\u2028b", "a\u200bb", "\ufeffa", "a\u202eb", "a\u00a0b", "a\x00b", "a\tb", "a\x7fb", "a\x85b"]
_RULE = r"; names must be printable \(no control characters, format characters, or separators other than the space\)"


def _code(name: str) -> str:
    return f"U\\+{ord([c for c in name if not c.isprintable()][0]):04X}"


@pytest.mark.parametrize("bad", _BAD)
def test_embedding_config_names_follow_the_feature_engines_rule(bad: str) -> None:
    kind = "control" if bad[1:2] in ("\x00", "\t", "\x7f", "\x85") else "non-printable"
    cfg = lambda table, feature: recgo.EmbeddingBagConfig(num_embeddings=4, embedding_dim=2, name=table,
                                                         feature_names=[feature])
    with pytest.raises(recgo.InvalidInputError, match=rf"^table 't': feature name .* contains the {kind} character "
                                                      rf"{_code(bad)}{_RULE}$"):
        recgo.EmbeddingBagCollection([cfg("t", bad)])
    with pytest.raises(recgo.InvalidInputError, match=rf"^table name .* contains the {kind} character {_code(bad)}{_RULE}$"):
        recgo.EmbeddingBagCollection([cfg(bad, "f")])
    with pytest.raises(recgo.InvalidInputError, match=rf"feature name .* contains the {kind} character {_code(bad)}{_RULE}"):
        FeatureEngine([Feature(bad)])  # the engine's own check, in the same words
    seq = recgo.EmbeddingConfig(num_embeddings=4, embedding_dim=2, name="t", feature_names=[bad])
    with pytest.raises(recgo.InvalidInputError, match=rf"feature name .* contains the {kind} character {_code(bad)}"):
        recgo.EmbeddingCollection([seq])


@pytest.mark.parametrize("bad, words", [("a\x00b", "contains the control character U\\+0000"),
                                        ("a\u2028b", "contains the non-printable character U\\+2028"),
                                        ("", "bad feature name ''"), ("a@t", "bad feature name 'a@t'")])
def test_a_shared_collections_feature_names_are_checked(bad: str, words: str) -> None:
    """``share=`` builds no tables, so its configs never reached the collection checks: these names
    were accepted (a newline failed later in Go, as "feature names: got 2, need 1")."""
    ebc = recgo.EmbeddingBagCollection([recgo.EmbeddingBagConfig(num_embeddings=4, embedding_dim=2, name="t",
                                                                 feature_names=["a"])])
    seq = recgo.EmbeddingConfig(num_embeddings=4, embedding_dim=2, name="t", feature_names=[bad])
    with pytest.raises(recgo.InvalidInputError, match=rf"table 't': .*{words}"):
        recgo.EmbeddingCollection([seq], share=ebc)
    ok = recgo.EmbeddingCollection([recgo.EmbeddingConfig(num_embeddings=4, embedding_dim=2, name="t",
                                                          feature_names=["a b", "é名"])], share=ebc)
    assert ok._features == ["a b", "é名"]


def test_check_name_agrees_with_the_engine() -> None:
    """Python's helper and the Go engine's check refuse the same characters: every code point of
    Latin-1, General Punctuation and the Specials block, and a few others (this Python's Unicode
    tables may lag Go's only for characters assigned since; none of these)."""
    points = [*range(0x100), *range(0x2000, 0x2070), *range(0xFFF0, 0x10000), 0x3000, 0xE000, 0x1F600, 0xE0001]
    for p in points:
        name = f"a{chr(p)}"
        try:
            check_name("feature name", name)
            mine = None
        except recgo.InvalidInputError as exc:
            mine = str(exc).split(" contains ")[1]
        try:
            FeatureEngine([Feature(name)])
            engine = None
        except recgo.InvalidInputError as exc:
            engine = str(exc).split(" contains ")[1]
        assert mine == engine, hex(p)
    assert sum(not chr(p).isprintable() for p in points) > 100  # the sweep does refuse some
