"""Session 45's catalogue of the mistakes a TorchRec user makes in a first week with recgo: each gets a
recgo error (a subclass of the matching built-in) that names the argument, table or feature and says
what to do, never a bare error from torch, ctypes or recgo's own internals, and never a silent run.

Each row is (build, expected exception, regex of its message). The rows marked ``fixed`` failed before
session 45 (the message each gave then is in its comment); the others are a sample of the catalogue's
good answers, kept so that a change which loses them is caught. ``build`` takes a temporary folder.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path
from typing import Any, Callable

import pytest
import torch

import recgo
from recgo import Feature, FeatureEngine
from recgo import planner as P
from recgo.data import Column, CSVSource
from recgo.errors import CapacityError, InvalidInputError, NotFoundError, RecgoIOError
from recgo.modules import optim

T = torch.tensor


def cfg(name: str = "t", feats: Any = ("f",), n: int = 10, d: Any = 4, **kw: Any) -> recgo.EmbeddingBagConfig:
    return recgo.EmbeddingBagConfig(num_embeddings=n, embedding_dim=d, name=name,
                                    feature_names=list(feats) if isinstance(feats, tuple) else feats, **kw)


def ecfg(feats: Any = ("f",)) -> recgo.EmbeddingConfig:
    return recgo.EmbeddingConfig(num_embeddings=10, embedding_dim=4, name="t",
                                 feature_names=list(feats) if isinstance(feats, tuple) else feats)


def ebc(*tables: recgo.EmbeddingBagConfig, **kw: Any) -> recgo.EmbeddingBagCollection:
    return recgo.EmbeddingBagCollection(list(tables) or [cfg()], **kw)


def kjt(keys: Any = ("f",), v: Any = (1, 2, 3), l: Any = (1, 2), **kw: Any) -> recgo.KeyedJaggedTensor:
    return recgo.KeyedJaggedTensor(list(keys), T(list(v)), lengths=T(list(l)), **kw)


def csv(tmp: Path, text: str = "label,a\n1,2\n0,3\n") -> Path:
    p = tmp / "d.csv"
    p.write_text(text)
    return p


COLS = [Column("label", "label"), Column("a", "sparse", "int")]


def drain(src: Any, bs: Any = 2) -> list:
    return [b.sparse.values().tolist() for b in recgo.DataPipeline(src, [Feature("a").mod(10)], bs)]


def profile_of(batches: Any, **kw: Any) -> P.Profile:
    return P.profile(batches, [cfg()], **kw)


def backward_twice() -> None:
    out = ebc(optimizer=optim.SGD(lr=0.1))(kjt()).values().sum()
    out.backward(retain_graph=True)
    out.backward()


def pipeline_over_linear(tmp: Path) -> recgo.TrainPipeline:
    m = torch.nn.Linear(1, 1)
    return recgo.TrainPipeline(m, torch.optim.SGD(m.parameters(), lr=0.1), CSVSource(csv(tmp), COLS),
                               [Feature("a").mod(10)], 2)


Build = Callable[[Path], Any]
IIE = InvalidInputError

MISTAKES: list[Any] = [
    # -- KeyedJaggedTensor ---------------------------------------------------------------------------
    pytest.param(lambda tmp: ebc()(recgo.KeyedJaggedTensor(["f"], T([1.0, 2.0]), lengths=T([1, 1]))), IIE,
                 r"values: dtype float32 is not supported \(expected int64, int32\)", id="kjt_float_values"),
    pytest.param(lambda tmp: ebc()(kjt(v=(1, 2))), IIE, r"lengths sum past the 2 values", id="kjt_lengths_sum_more"),
    pytest.param(lambda tmp: ebc()(kjt(v=(1, 2, 3, 4))), IIE, r"lengths sum to 3 but there are 4 values",
                 id="kjt_lengths_sum_fewer"),
    pytest.param(lambda tmp: kjt(keys=("f", "f"), v=(1, 2), l=(1, 1)), IIE, r"keys: duplicate feature names \['f'\]",
                 id="kjt_duplicate_keys"),
    pytest.param(lambda tmp: recgo.KeyedJaggedTensor("f", T([1, 2]), lengths=T([1, 1])), IIE,
                 r"keys: expected a list of feature names, got str", id="kjt_keys_a_string"),
    pytest.param(lambda tmp: ebc()(recgo.KeyedJaggedTensor(["f"], T([1, 2, 3]), offsets=T([0, 2, 1, 3]))), IIE,
                 r"offsets must rise monotonically from 0", id="kjt_offsets_decreasing"),
    pytest.param(lambda tmp: kjt(weights=T([1.0, 2.0])), IIE, r"weights: 2 weights for 3 values",
                 id="kjt_weights_wrong_length"),
    pytest.param(lambda tmp: recgo.KeyedJaggedTensor(["f"], T([[1, 2], [3, 4]]), lengths=T([2, 2])), IIE,
                 r"values: expected 1 dimension\(s\), got shape \(2, 2\)", id="kjt_2d_values"),
    pytest.param(lambda tmp: ebc()(recgo.KeyedJaggedTensor(["f"], torch.empty(3, dtype=torch.long, device="meta"),
                                                           lengths=T([1, 2]))), IIE,
                 r"a tensor on meta .* build the batch on the CPU", id="kjt_meta_values"),
    pytest.param(lambda tmp: ebc(cfg("a", ("f",)), cfg("b", ("g",)))(kjt()), IIE,
                 r"the batch lacks features \['g'\] \(its keys: \['f'\]\)", id="kjt_lacks_a_feature"),
    pytest.param(lambda tmp: recgo.KeyedJaggedTensor.from_lengths_sync(["f", "g"], T([1, 2, 3]), T([1, 2, 0])), IIE,
                 r"lengths: 3 entries is not a multiple of the 2 keys", id="from_lengths_sync_wrong_stride"),
    pytest.param(lambda tmp: ebc()({"f": T([1, 2])}), IIE, r"got dict \(for a dict of per-feature inputs use "
                 r"KeyedJaggedTensor.from_jagged_dict", id="dict_instead_of_kjt"),
    pytest.param(lambda tmp: kjt(stride=3), IIE, r"stride 3 disagrees with the lengths \(batch size 2\)",
                 id="kjt_stride_disagrees"),
    # -- configs and collections ------------------------------------------------------------------
    # fixed: a bare string was split into one-letter features; the forward then said
    # "the batch lacks features ['u', 's', 'e', 'r', '_', 'i', 'd'] (its keys: ['user_id'])"
    pytest.param(lambda tmp: ebc(cfg(feats="user_id")), IIE,
                 r"table 't': feature_names must be a list of feature names, got the string 'user_id' "
                 r"\(write feature_names=\['user_id'\]\)", id="fixed_feature_names_a_string"),
    pytest.param(lambda tmp: recgo.EmbeddingCollection([ecfg(feats="user_id")]), IIE,
                 r"feature_names must be a list .* got the string 'user_id'", id="fixed_sequence_feature_names_a_string"),
    # fixed: same, from a TorchRec config (converted with list(feature_names)), built without a word
    pytest.param(lambda tmp: ebc(pytest.importorskip("torchrec").EmbeddingBagConfig(
        num_embeddings=10, embedding_dim=4, name="t", feature_names="user_id")), IIE,
                 r"feature_names must be a list .* got the string 'user_id'", id="fixed_torchrec_feature_names_a_string"),
    # fixed: "EmbeddingBagCollection needs at least one table (a list of EmbeddingBagConfig)", given one
    pytest.param(lambda tmp: recgo.EmbeddingBagCollection(cfg()), IIE,
                 r"EmbeddingBagCollection: tables must be a list of EmbeddingBagConfig, got a single "
                 r"EmbeddingBagConfig 't' \(pass \[config\]\)", id="fixed_one_config_not_in_a_list"),
    # fixed: TypeError: 'EmbeddingConfig' object is not iterable
    pytest.param(lambda tmp: recgo.EmbeddingCollection(ecfg()), IIE,
                 r"EmbeddingCollection: tables must be a list of EmbeddingConfig, got a single EmbeddingConfig",
                 id="fixed_sequence_one_config_not_in_a_list"),
    pytest.param(lambda tmp: ebc(cfg("t", ("f",)), cfg("t", ("g",))), IIE, r"duplicate table name 't'",
                 id="duplicate_table_names"),
    pytest.param(lambda tmp: ebc(cfg(d=0)), IIE, r"table 't': embedding_dim must be a positive int, got 0",
                 id="embedding_dim_zero"),
    pytest.param(lambda tmp: ebc(cfg(d=4.0)), IIE, r"embedding_dim must be a positive int, got 4.0",
                 id="embedding_dim_float"),
    pytest.param(lambda tmp: ebc(cfg(n=0)), IIE, r"num_embeddings must be a positive int, got 0",
                 id="num_embeddings_zero"),
    pytest.param(lambda tmp: ebc(cfg(pooling="max")), IIE, r"pooling 'max' is not supported \(use 'sum' or 'mean'\)",
                 id="pooling_max"),
    pytest.param(lambda tmp: ebc(cfg(data_type="fp16")), IIE, r"data_type fp16 is not supported.*use DataType.FP32",
                 id="data_type_fp16"),
    pytest.param(lambda tmp: recgo.EmbeddingBagCollection([ecfg()]), IIE,
                 r"EmbeddingConfig 't' is a sequence \(unpooled\) table's config", id="pooled_given_sequence_config"),
    pytest.param(lambda tmp: ebc(optimizer=torch.optim.Adagrad), IIE,
                 r"torch.optim.Adagrad is not a recgo fused optimizer.*recgo.modules.optim.Adagrad\(lr=...\)",
                 id="torch_optimizer_class"),
    pytest.param(lambda tmp: ebc(optimizer=optim.Adagrad), IIE, r"pass an instance, e.g. .*Adagrad\(lr=0.01\)",
                 id="recgo_optimizer_class_not_instance"),
    pytest.param(lambda tmp: optim.SGD(lr="0.1"), IIE, r"hyper-parameters must be numbers, got \{'lr': '0.1'\}",
                 id="lr_a_string"),
    pytest.param(lambda tmp: ebc()(kjt(v=(1, 2, 10))), IIE, r'table "t": id 10 out of range \[0, 10\) .*'
                 r"give the table a larger num_embeddings", id="id_past_num_embeddings"),
    pytest.param(lambda tmp: ebc()(kjt(v=(1, 2, -1))), IIE, r"id -1 out of range", id="id_negative"),
    pytest.param(lambda tmp: backward_twice(), IIE, r"with a fused optimizer a graph's backward runs once",
                 id="backward_twice_fused"),
    pytest.param(lambda tmp: ebc().load_state_dict({"embedding_bags.t.weight": torch.zeros(5, 4)}), IIE,
                 r"'embedding_bags.t.weight' has shape \(5, 4\), this collection's is \(10, 4\)",
                 id="load_state_dict_other_shape"),
    pytest.param(lambda tmp: ebc(optimizer=optim.SGD(lr=0.1)).half(), IIE,
                 r"cannot cast a recgo embedding collection to torch.float16", id="half"),
    pytest.param(lambda tmp: ebc().to("meta"), IIE, r"cannot move a built recgo embedding collection to meta",
                 id="to_meta"),
    pytest.param(lambda tmp: ebc(device="cuda"), IIE, r"device cuda: recgo's embedding engine runs on CPU memory",
                 id="device_cuda"),
    # -- readers and pipelines --------------------------------------------------------------------
    # fixed: AttributeError: 'NoneType' object has no attribute 'encode'
    pytest.param(lambda tmp: CSVSource(csv(tmp), COLS, delimiter=None), IIE, r"the delimiter must be one byte, got None",
                 id="fixed_csv_delimiter_none"),
    # fixed: TypeError: Column.__init__() takes from 2 to 5 positional arguments but 6 were given
    pytest.param(lambda tmp: CSVSource(csv(tmp), ["label", "a"]), IIE,
                 r"columns\[0\]: expected a Column, .* got 'label' \(write Column\('label', role\)",
                 id="fixed_csv_columns_as_names"),
    # fixed: TypeError: 'NoneType' object is not iterable
    pytest.param(lambda tmp: CSVSource(csv(tmp), None), IIE, r"columns must be a list of Column\(name, role, type\), "
                 r"got NoneType", id="fixed_csv_columns_none"),
    # fixed: TypeError: 'NoneType' object is not iterable (and 'int' object ...)
    pytest.param(lambda tmp: CSVSource(None, COLS), IIE,
                 r"CSVSource: paths must be a file path or a list of them, got NoneType", id="fixed_source_paths_none"),
    pytest.param(lambda tmp: CSVSource([csv(tmp), 3], COLS), IIE,
                 r"CSVSource: paths must be file paths \(str or os.PathLike\), got 3", id="fixed_source_paths_an_int"),
    pytest.param(lambda tmp: drain(CSVSource(tmp / "nope.csv", COLS)), RecgoIOError, r"nope.csv: no such file",
                 id="csv_missing_file"),
    pytest.param(lambda tmp: drain(CSVSource(tmp, COLS)), RecgoIOError, r"is a directory, not a file",
                 id="csv_a_directory"),
    pytest.param(lambda tmp: drain(CSVSource(csv(tmp, "label,b\n1,2\n"), COLS)), IIE,
                 r'missing column "a" \(the header has "label", "b"\)', id="csv_wrong_column_name"),
    pytest.param(lambda tmp: drain(CSVSource(csv(tmp, "label;a\n1;2\n"), COLS)), IIE,
                 r'missing column "label" \(the header has "label;a"\)', id="csv_wrong_delimiter"),
    pytest.param(lambda tmp: drain(CSVSource(csv(tmp, ""), COLS)), IIE, r"empty file: the header line is missing",
                 id="csv_empty_file"),
    pytest.param(lambda tmp: drain(CSVSource(csv(tmp), COLS), bs=0), IIE, r"batch size 0 outside \[1, ",
                 id="batch_size_zero"),
    pytest.param(lambda tmp: drain(CSVSource(csv(tmp), [Column("label", "label"), Column("a", "sparse", "integer")])),
                 IIE, r'column "a": unknown type "integer" \(int, hex, string, float\)', id="column_type_typo"),
    pytest.param(lambda tmp: drain(CSVSource(csv(tmp, "label,a\n1,xyz\n"), COLS)), IIE,
                 r'line 2 column 2 \(a\): "xyz" is not a valid int value', id="csv_id_not_a_number"),
    pytest.param(lambda tmp: recgo.DataPipeline(str(csv(tmp)), [Feature("a")], 2), IIE,
                 r"source must be a recgo.data source, got str", id="pipeline_given_a_path"),
    # fixed: TypeError: Linear.forward() takes 2 positional arguments but 3 were given (in the first step)
    pytest.param(pipeline_over_linear, IIE, r"TrainPipeline: Linear.forward\(input.*\) does not take the two "
                 r"arguments a step passes .* pass forward=lambda model, batch", id="fixed_train_pipeline_forward"),
    # -- feature transforms -----------------------------------------------------------------------
    pytest.param(lambda tmp: FeatureEngine([{"name": "a", "ops": ["hashh"]}]), IIE,
                 r'feature "a" op 0 \(hashh\): unknown op "hashh" \(known: hash, mod', id="feature_unknown_op"),
    pytest.param(lambda tmp: FeatureEngine([Feature("a", dtype="float").bucketize([10, 1, 100])]), IIE,
                 r'feature "a" op 0 \(bucketize\): bucketize boundaries must be strictly increasing',
                 id="bucketize_unsorted"),
    pytest.param(lambda tmp: FeatureEngine([Feature("a").hash().mod(0)]), IIE,
                 r'feature "a" op 1 \(mod\): mod needs a bucket count n > 0, got 0', id="mod_zero"),
    pytest.param(lambda tmp: Feature("a", dtype="int"), IIE, r"feature 'a': dtype must be one of int64, float, bytes",
                 id="feature_dtype_typo"),
    pytest.param(lambda tmp: FeatureEngine([{"name": "a", "opps": ["hash"]}]), IIE, r"feature 'a': unknown keys \['opps'\]",
                 id="feature_config_key_typo"),
    pytest.param(lambda tmp: FeatureEngine([Feature("a").mod(10)])(kjt(keys=("b",))), IIE,
                 r'feature batch lacks input "a"', id="feature_input_missing"),
    # -- planner ----------------------------------------------------------------------------------
    # fixed: "profile: empty profile (no samples kept out of 2 offered)", which did not name sample_rate
    pytest.param(lambda tmp: profile_of([kjt()]), IIE, r"sample_rate=0.01 kept none of the 2 samples offered: "
                 r"profile more batches, or raise sample_rate", id="fixed_profile_sample_rate_keeps_nothing"),
    pytest.param(lambda tmp: profile_of([kjt(keys=("g",))], sample_rate=1.0), IIE,
                 r"no batch key feeds a profiled table \(keys seen: g; tables: t\)", id="profile_keys_feed_no_table"),
    pytest.param(lambda tmp: P.profile([kjt()], []), IIE, r"profile: no tables to profile", id="profile_without_tables"),
    pytest.param(lambda tmp: P.plan(profile_of([kjt()], sample_rate=1.0), P.Topology(nodes=1, gpus_per_node=1),
                                    "mlip"), IIE, r"strategy 'mlip': expected one of", id="plan_strategy_typo"),
    pytest.param(lambda tmp: P.plan(P.profile([kjt()], [cfg(n=10**7, d=128)], sample_rate=1.0),
                                    P.Topology(nodes=1, gpus_per_node=1, hbm_bytes=10**6, host_bytes=10**6)),
                 CapacityError, r'table "t" needs 5.12 GB but one GPU\'s HBM plus its node\'s host memory hold 2 MB',
                 id="plan_topology_too_small"),
    # -- KeyedTensor ------------------------------------------------------------------------------
    pytest.param(lambda tmp: recgo.KeyedTensor(["a", "b"], [2, 2], torch.zeros(2, 5)), IIE,
                 r"values of shape \(2, 5\) do not hold the keys' 4 columns", id="keyed_tensor_width"),
    pytest.param(lambda tmp: recgo.KeyedTensor(["a"], [2], torch.zeros(2, 2))["b"], NotFoundError,
                 r"key 'b' is not in this KeyedTensor \(keys: \['a'\]\)", id="keyed_tensor_unknown_key"),
]


@pytest.mark.parametrize("build, error, match", MISTAKES)
def test_a_mistake_gets_an_error_that_names_it(tmp_path: Path, build: Build, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match) as caught:
        build(tmp_path)
    assert isinstance(caught.value, recgo.RecgoError)


def test_torch_style_betas_just_work() -> None:
    """Fixed: ``optim.Adam(lr=..., betas=(b1, b2))``, torch.optim.Adam's spelling, raised TypeError
    (unexpected keyword 'betas'); it is the same optimizer as beta1=/beta2= now (equal, same repr, same
    updates), for AdamW too; a pair that is not two values, or betas beside beta1/beta2, is named."""
    from recgo.modules import optim

    a = optim.Adam(lr=0.01, betas=(0.8, 0.99))
    assert a == optim.Adam(lr=0.01, beta1=0.8, beta2=0.99) and "beta1=0.8, beta2=0.99" in repr(a)
    assert optim.AdamW(lr=0.01, betas=[0.5, 0.6]).params()[3:5] == (0.5, 0.6)
    w = torch.randn(6, 3)
    got, want = (recgo.EmbeddingBagCollection([cfg(n=6, d=3)], optimizer=o, seed=2)
                 for o in (a, optim.Adam(lr=0.01, beta1=0.8, beta2=0.99)))
    for m in (got, want):
        m.load_state_dict({"embedding_bags.t.weight": w}, strict=False)
        for _ in range(3):
            m(kjt(v=(1, 2, 5))).values().pow(2).sum().backward()
    assert torch.equal(got.state_dict()["embedding_bags.t.weight"], want.state_dict()["embedding_bags.t.weight"])
    with pytest.raises(InvalidInputError, match=r"optimizer Adam: betas must be a pair \(beta1, beta2\), got \(0.9,\)"):
        optim.Adam(lr=0.1, betas=(0.9,))
    with pytest.raises(InvalidInputError, match=r"optimizer AdamW: give betas or beta1/beta2, not both"):
        optim.AdamW(lr=0.1, betas=(0.8, 0.9), beta1=0.5)


@pytest.mark.parametrize("build, want", [
    (lambda o: o.SGD(lr=0.1, momentum=0, nesterov=False, dampening=0.5), ("SGD", 0.1)),
    (lambda o: o.SGD(learning_rate=0.2), ("SGD", 0.2)),
    (lambda o: o.Adagrad(lr=0.1, initial_accumulator_value=0.0, lr_decay=0, foreach=None), ("Adagrad", 0.1)),
    (lambda o: o.Adam(lr=0.01, amsgrad=False, maximize=False), ("Adam", 0.01)),
])
def test_torch_only_options_at_their_neutral_value_just_work(build: Any, want: tuple[str, float]) -> None:
    """Fixed: torch.optim's options recgo's updates do not have (momentum, nesterov, lr_decay,
    initial_accumulator_value, amsgrad, ...) raised Python's bare "unexpected keyword argument" even at
    the value that leaves the update as recgo's; FBGEMM's ``learning_rate`` likewise. They are taken now
    (as ``recgo.modules.optim.from_torch`` takes them), and the optimizer equals the one without them."""
    from recgo.modules import optim

    o = build(optim)
    assert (type(o).__name__, o.lr) == want and o == getattr(optim, want[0])(lr=want[1])


@pytest.mark.parametrize("build, match", [
    (lambda o: o.SGD(lr=0.1, momentum=0.9), r"optimizer SGD: momentum=0.9 is not supported by recgo's fused SGD "
                                            r"\(only momentum=0.0\)"),
    (lambda o: o.Adagrad(lr=0.1, lr_decay=0.01), r"lr_decay=0.01 is not supported by recgo's fused Adagrad"),
    (lambda o: o.AdamW(lr=0.1, amsgrad=True), r"optimizer AdamW: amsgrad=True is not supported"),
    (lambda o: o.SGD(0.1, learning_rate=0.2), r"optimizer SGD: give lr or learning_rate, not both"),
    # session 46: an argument no optimizer takes named, with the nearest one it does
    (lambda o: o.SGD(lr=0.1, foo=1), r"optimizer SGD: unknown argument 'foo' \(it takes lr, eps, beta1, beta2, "
                                     r"weight_decay, and torch.optim's learning_rate"),
    (lambda o: o.Adam(lr=0.1, bet=(0.9, 0.99)), r"unknown argument 'bet' .*did you mean 'betas' for 'bet'\?"),
    (lambda o: o.Adagrad(lr=0.1, epsilon=1e-8, x=1), r"unknown arguments 'epsilon', 'x' .*did you mean 'eps'"),
    # betas beside a beta1 equal to its default was taken, the explicit beta1 ignored
    (lambda o: o.Adam(lr=0.1, betas=(0.8, 0.99), beta1=0.9), r"optimizer Adam: give betas or beta1/beta2, not both"),
])
def test_torch_only_options_that_would_change_the_update_are_named(build: Any, match: str) -> None:
    """Fixed: ``SGD(lr=0.1, momentum=0.9)`` raised Python's TypeError "unexpected keyword argument
    'momentum'"; it names the option and the value recgo's update has now."""
    from recgo.modules import optim

    with pytest.raises(InvalidInputError, match=match):
        build(optim)


def test_one_kjt_given_as_the_batches_is_profiled_as_one_batch() -> None:
    """Fixed: ``profile(kjt, tables)`` iterated the KJT, whose ``kjt[0]`` raised
    ``NotFoundError: feature 0 is not in this KeyedJaggedTensor``."""
    one, listed = profile_of(kjt(), sample_rate=1.0), profile_of([kjt()], sample_rate=1.0)
    assert one.sampled == listed.sampled == (2, 2)
    assert one.to_dict() == listed.to_dict()


@pytest.mark.parametrize("sharding, kwargs, error, match", [
    ("rowwise", {}, InvalidInputError, r"table 't': sharding 'rowwise' is not one of \['data_parallel', 'hash'"),
    ({"tt": "hash"}, {}, NotFoundError, r"sharding names tables \['tt'\], which no collection of the model has "
                                        r"\(its tables: \['t'\]\)"),
    # fixed: "optimizer: expected a recgo fused optimizer, got type"
    ("hash", {"optimizer": torch.optim.SGD}, InvalidInputError,
     r"torch.optim.SGD is not a recgo fused optimizer; .* recgo.modules.optim.SGD\(lr=...\)"),
    # fixed: the list of arguments the collections take began with the private '_init' and 'kwargs'
    ("hash", {"modee": "flat"}, InvalidInputError,
     r"unknown arguments \['modee'\] \(the sharded collections take \['gradient_division', 'is_weighted', 'mode'"),
], ids=["unknown_kind", "mapping_names_unknown_table", "fixed_torch_optimizer", "fixed_unknown_argument"])
def test_shard_model_mistakes(tmp_path: Path, sharding: Any, kwargs: dict, error: type[Exception], match: str) -> None:
    from recgo.distributed import shard_model
    from spawned import one_rank

    model = torch.nn.Sequential(ebc(optimizer=optim.SGD(lr=0.1)))
    with one_rank(tmp_path), pytest.raises(error, match=match):
        shard_model(model, sharding, **kwargs)


def test_shard_model_without_a_process_group() -> None:
    from recgo.distributed import shard_model

    with pytest.raises(InvalidInputError, match=r"call torch.distributed.init_process_group first"):
        shard_model(torch.nn.Sequential(ebc(optimizer=optim.SGD(lr=0.1))))


@pytest.mark.parametrize("argv, match", [
    (["--model", "dlrn"], r"argument --model: invalid choice: 'dlrn'"),
    (["--data", "{tmp}/nope.txt"], r"InvalidInputError: data: .*nope.txt is not a file"),
    (["--config", "{tmp}/c.yaml"], r"c.yaml: unknown fields \['batch_sizee'\] \(known: \['activation', 'batch_size'"),
    (["--nproc", "0"], r"nproc must be an integer in \[1, 1024\], got 0"),
    (["--backend", "torchreck"], r"backend \['torchreck'\]: choose from \('recgo', 'torchrec', 'torch'\) or 'all'"),
], ids=["unknown_model", "data_missing", "yaml_unknown_key", "nproc_zero", "backend_typo"])
def test_train_cli_mistakes(tmp_path: Path, argv: list[str], match: str) -> None:
    from recgo.__main__ import main

    (tmp_path / "c.yaml").write_text("batch_sizee: 64\n")
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            rc = main(["train", "--steps", "1", *[a.format(tmp=tmp_path) for a in argv]])
        except SystemExit as exc:  # argparse's own refusals
            rc = exc.code
    assert rc == 2
    assert re.search(match, err.getvalue()), err.getvalue()
