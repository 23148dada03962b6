"""The planner on inputs it misread or let escape: a key several tables read (profiled for every
table; a PlannedEmbeddingBagCollection passes it on as it is where no planned table reads it), FP16/BF16
configs (priced at their own bytes per element), Remap.apply_kjt on a batch whose keys reach no
planned table, synthetic models fitted to data without coverage, and bad arguments that escaped as
bare AttributeError/TypeError/ValueError/AssertionError."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

import recgo
from recgo import InvalidInputError
from recgo import planner as P
from recgo.planner import synthetic as S


def _kjt(keys: list[str], ids: torch.Tensor) -> recgo.KeyedJaggedTensor:
    """One ID per sample for each key (the same IDs under every key)."""
    return recgo.KeyedJaggedTensor(keys, ids.repeat(len(keys)), lengths=torch.ones(len(keys) * ids.numel(),
                                                                                   dtype=torch.int64))


def test_a_key_two_tables_read_is_profiled_for_both() -> None:
    """The EBC looks a key several configs list up in each table: the profiler counts it for each (it
    counted it for the first only, and the second table was planned on zero lookups)."""
    torch.manual_seed(0)
    tabs = [recgo.EmbeddingBagConfig(50, 4, "t_a", ["shared"]), recgo.EmbeddingBagConfig(50, 4, "t_b", ["shared"]),
            recgo.EmbeddingBagConfig(30, 4, "t_c", ["own"])]
    draws = [((torch.rand(64) ** 3) * 50).long() for _ in range(20)]
    # variable bag lengths, the shared key between two others, so the copy must cut the right segments
    batches, separate = [], []
    for i, ids in enumerate(draws):
        lengths = torch.tensor([i % 3, 1, 2, 0] * 8, dtype=torch.int64)
        shared = ids[: int(lengths.sum())]
        own = ids.flip(0)[: int(lengths.sum())] % 30
        batches.append(recgo.KeyedJaggedTensor(["own", "shared"], torch.cat([own, shared]),
                                               lengths=torch.cat([lengths, lengths])))
        separate.append(recgo.KeyedJaggedTensor(["t_c", "t_a", "t_b"], torch.cat([own, shared, shared]),
                                                lengths=torch.cat([lengths, lengths, lengths])))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", P.ThinProfileWarning)
        prof = P.profile(batches, tabs, sample_rate=1.0)
        want = P.profile(separate, [P.TableSpec(c.name, c.num_embeddings, 4) for c in tabs], sample_rate=1.0)
    got = {t["name"]: t for t in prof.to_dict(ranked=True)["tables"]}
    exp = {t["name"]: t for t in want.to_dict(ranked=True)["tables"]}
    assert got["t_b"]["lookups"] == got["t_a"]["lookups"] == sum(int(b.lengths()[32:].sum()) for b in batches) > 0
    assert got == exp


def test_a_key_shared_by_tables_the_plan_leaves_out_passes_as_it_is(tmp_path: Path) -> None:
    """A key that only tables the plan leaves out share reaches them as it is (a key that planned
    tables share: test_planner_shared_keys.py)."""
    torch.manual_seed(0)
    tabs = [recgo.EmbeddingBagConfig(50, 4, "t_a", ["shared"]), recgo.EmbeddingBagConfig(50, 4, "t_b", ["shared"]),
            recgo.EmbeddingBagConfig(40, 4, "t_c", ["own"])]
    ids = ((torch.rand(64) ** 4) * 50).long()
    prof = P.profile([{"t_a": ids, "t_b": 49 - ids, "t_c": ids % 40}], [P.TableSpec(c.name, c.num_embeddings, 4)
                                                                        for c in tabs],
                     sample_rate=1.0, min_lookups=0)
    topo = P.Topology(nodes=1, gpus_per_node=2, hbm_bytes=200, host_bytes=10**6)
    src = recgo.EmbeddingBagCollection(tabs, seed=0)
    only_c = P.plan(prof, topo, tables=["t_c"])
    pe = P.PlannedEmbeddingBagCollection.from_ebc(src, only_c)
    batch = recgo.KeyedJaggedTensor(["shared", "own"], torch.cat([ids, ids % 40]),
                                    lengths=torch.ones(128, dtype=torch.int64))
    a, b = src(batch), pe(batch)
    assert a.keys() == b.keys() == ["shared@t_a", "shared@t_b", "own"]
    for k in a.keys():
        assert torch.equal(a[k], b[k]), k
    assert pe.hot_rows("t_c") == only_c.table("t_c")["hot_rows"] < 40


def test_fp16_and_bf16_configs_are_profiled_at_two_bytes() -> None:
    """A config's data_type sets its bytes per element (FP16 was priced at 4): a GPU with exactly the
    table's FP16 bytes of HBM holds all its rows; sub-byte types are refused by name."""
    tr = pytest.importorskip("torchrec")
    from torchrec.modules.embedding_configs import DataType

    from recgo.planner._torchrec import _meta_ebc

    kjt = tr.KeyedJaggedTensor(keys=["f"], values=torch.randint(0, 1000, (100,)),
                               lengths=torch.ones(100, dtype=torch.int64))
    for dt, size in ((DataType.FP16, 2), (DataType.BF16, 2), (DataType.FP32, 4), (DataType.INT8, 1)):
        cfg = tr.EmbeddingBagConfig(name="t", embedding_dim=64, num_embeddings=1000, feature_names=["f"], data_type=dt)
        prof = P.profile([kjt], [cfg], sample_rate=1.0, min_lookups=0)
        assert prof.table("t")["elem_bytes"] == size, dt
    cfg = tr.EmbeddingBagConfig(name="t", embedding_dim=64, num_embeddings=1000, feature_names=["f"],
                                data_type=DataType.FP16)
    prof = P.profile([kjt], [cfg], sample_rate=1.0, min_lookups=0)
    pl = P.plan(prof, P.Topology(nodes=1, gpus_per_node=1, hbm_bytes=1000 * 64 * 2, host_bytes=10**9))
    assert (pl.tables[0]["hot_rows"], pl.tables[0]["hot_bytes"]) == (1000, 128000)
    # TorchRec's planner is handed the same bytes per element
    assert _meta_ebc([prof.table("t")]).embedding_bag_configs()[0].data_type == DataType.FP16
    assert P.profile([{"t": torch.tensor([1])}], [recgo.EmbeddingBagConfig(10, 4, "t", ["t"])],
                     sample_rate=1.0, min_lookups=0).table("t")["elem_bytes"] == 4
    cfg = tr.EmbeddingBagConfig(name="q", embedding_dim=64, num_embeddings=10, feature_names=["f"],
                                data_type=DataType.INT4)
    with pytest.raises(InvalidInputError, match=r"table 'q': data_type .*INT4.* no whole number of bytes"):
        P.profile([kjt], [cfg], sample_rate=1.0)


def test_apply_kjt_refuses_a_batch_that_reaches_no_planned_table(tmp_path: Path) -> None:
    """Feature names other than the table names renumbered nothing, silently: apply_kjt raises naming
    the keys, the tables and feature_to_table, and with the mapping renumbers as apply does; the plan's
    report names the mapping and says what TorchRec's constraints carry."""
    torch.manual_seed(0)
    tabs = [recgo.EmbeddingBagConfig(50, 4, "t_user", ["user_id"])]
    ids = ((torch.rand(200) ** 4) * 50).long()
    kjt = _kjt(["user_id"], ids)
    prof = P.profile([kjt], tabs, sample_rate=1.0, min_lookups=0)
    pl = P.plan(prof, P.Topology(nodes=1, gpus_per_node=1, hbm_bytes=100, host_bytes=10**6))
    rm = pl.remap()
    with pytest.raises(InvalidInputError, match=r"no key of the batch \(user_id\) reaches a planned table "
                                                r"\(t_user\).*feature_to_table=\{key: table\}"):
        rm.apply_kjt(kjt)
    renum = rm.apply_kjt(kjt, {"user_id": "t_user"})
    assert torch.equal(renum.values(), rm.apply("t_user", ids)) and not torch.equal(renum.values(), ids)
    src = recgo.EmbeddingBagCollection(tabs, seed=0)
    pe = P.PlannedEmbeddingBagCollection.from_ebc(src, pl)
    assert torch.allclose(pe.ebc(renum).values(), src(kjt).values())
    report = (pl.save(tmp_path / "plan", plots=False) / "report.md").read_text()
    assert "remap.apply_kjt(batch, feature_to_table={key: table})" in report
    assert "carry the ranks" not in report and "not the ranks" in report


def test_rm_profile_from_data_without_coverage(tmp_path: Path) -> None:
    """Only MovieLens ratings: skew and pooling are fitted, coverage falls back to the paper's spread
    (rm_profile raised a bare IndexError)."""
    (tmp_path / "movielens").mkdir()
    rows = ["userId,movieId,rating,timestamp"]
    rows += [f"{u},{(u * 7 + j * j) % 40 if j % 3 else j % 5},4.0,0" for u in range(60) for j in range(1 + u % 9)]
    (tmp_path / "movielens" / "ratings.csv").write_text("\n".join(rows) + "\n")
    f = S.fit_real_samples(tmp_path)
    assert f.alphas and f.poolings and f.coverages == S.PAPER_DEFAULTS.coverages
    assert f.sources == ["ratings.csv", "default coverages (no Criteo sample)"]
    prof = S.rm_profile("rm1", f, tables=8, size_scale=8 / 397)
    assert len(prof.tables) == 8
    # a Fitted built by hand with no coverages is drawn from the defaults too
    spec = S.rm_spec("rm1", S.Fitted(alphas=[1.0], coverages=[], poolings=[1.0]), tables=8)
    assert spec["coverages"][:16] == S._spread(S.PAPER_DEFAULTS.coverages, 16)


def test_planner_arguments_raise_named_errors() -> None:
    """Each of these escaped as a bare AttributeError, TypeError, ValueError or TorchRec's
    AssertionError, or (a module with other row counts) was accepted."""
    tr = pytest.importorskip("torchrec")
    prof = P.profile([{"a": torch.randint(0, 10, (50,))}], [P.TableSpec("a", 10, 4)], sample_rate=1, min_lookups=0)
    pl = P.plan(prof, P.Topology(nodes=1, gpus_per_node=2))
    cases = [
        (lambda: P.plan(prof, None, None), r"strategy: expected one of .* got None"),
        (lambda: P.plan(prof, {"nodes": 1}), r"topology: expected a recgo.planner.Topology, got dict"),
        (lambda: P.plan(None), r"profile: expected a recgo.planner.Profile, got NoneType"),
        (lambda: P.evaluate(prof, P.Topology(), {"a": 0}), r"placement of table 'a': expected a \(rank, hot_rows\)"),
        (lambda: P.evaluate(prof, P.Topology(), {"a": (0.5, 3)}), r"placement of table 'a'.*whole numbers"),
        (lambda: P.evaluate(prof, P.Topology(), {"a": (2**63, 0)}), r"rank 9223372036854775808 does not fit"),
        (lambda: P.profile([{"a": torch.tensor([1])}], [{"name": "a"}], sample_rate=1),
         r"tables: the dict \{'name': 'a'\} lacks \['rows'\]"),
        (lambda: P.profile([{"a": torch.tensor([1])}], [{"name": "a", "rows": 5, "dims": 4}], sample_rate=1),
         r"has unknown keys \['dims'\]"),
    ]
    for fn, match in cases:
        with pytest.raises(InvalidInputError, match=match):
            fn()
    assert P.evaluate(prof, P.Topology(nodes=1, gpus_per_node=2), {"a": (1, 3)}).table("a")["rank"] == 1

    def module(name: str, rows: int) -> object:
        return tr.EmbeddingBagCollection(tables=[tr.EmbeddingBagConfig(
            name=name, embedding_dim=4, num_embeddings=rows, feature_names=[name])], device=torch.device("meta"))

    with pytest.raises(InvalidInputError, match=r"the module's tables \['b'\] are not the plan's \['a'\]"):
        P.torchrec_sharding_plan(pl, module("b", 10))
    with pytest.raises(InvalidInputError, match=r"table 'a' has 20 rows of dim 4 in the module, but the plan was "
                                                r"made for 10 rows"):
        P.torchrec_sharding_plan(pl, module("a", 20))
    with pytest.raises(InvalidInputError, match=r"module: expected a TorchRec EmbeddingBagCollection, got int"):
        P.torchrec_sharding_plan(pl, 3)
    msp = P.torchrec_sharding_plan(pl, module("a", 10))
    assert msp["a"].ranks == [pl.table("a")["rank"]]


def test_from_ebc_keeps_a_weighted_collection_weighted() -> None:
    """from_ebc dropped is_weighted: the planned collection pooled a weighted batch unweighted, silently."""
    tabs = [recgo.EmbeddingBagConfig(50, 4, "t", ["f"])]
    ids = ((torch.rand(200, generator=torch.Generator().manual_seed(0)) ** 4) * 50).long()
    prof = P.profile([_kjt(["f"], ids)], tabs, sample_rate=1.0, min_lookups=0)
    pl = P.plan(prof, P.Topology(nodes=1, gpus_per_node=1, hbm_bytes=100, host_bytes=10**6))
    src = recgo.EmbeddingBagCollection(tabs, seed=0, is_weighted=True)
    pe = P.PlannedEmbeddingBagCollection.from_ebc(src, pl)
    batch = recgo.KeyedJaggedTensor(["f"], ids[:6], weights=torch.arange(6.0) + 0.5, lengths=torch.tensor([1, 2, 3]))
    assert pe.ebc.is_weighted()
    torch.testing.assert_close(pe(batch).values(), src(batch).values())
    assert not P.PlannedEmbeddingBagCollection.from_ebc(src, pl, is_weighted=False).ebc.is_weighted()


@pytest.mark.parametrize("values, lengths", [([], [0, 0, 0]), ([5], [1, 0, 0])], ids=["no_ids", "one_id"])
def test_a_profile_counted_from_batches_without_ids_warns_it_is_thin(values: list[int], lengths: list[int]) -> None:
    """Batches holding no ID gave no ThinProfileWarning (a profile of zero lookups everywhere was taken
    for a synthetic one), and planning went on as if every table were unused; one ID warned."""
    batch = recgo.KeyedJaggedTensor(["a"], torch.tensor(values, dtype=torch.int64), lengths=torch.tensor(lengths))
    with pytest.warns(P.ThinProfileWarning, match="1 of 1 tables rest on fewer than"):
        prof = P.profile([batch], [P.TableSpec("a", 100, 4)], sample_rate=1.0)
    assert prof.thin_tables() == {"a": len(values)}
