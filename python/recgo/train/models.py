"""The dense halves of the ranking models the training job trains, in plain PyTorch.

Every model takes the sparse half's output as ordinary tensors, so the same module (and the same
initial weights) serves every backend: ``pooled`` is ``[B, F, D]`` (one pooled embedding per sparse
feature, in the order of the model's feature list), ``dense`` is ``[B, dense_in]``, and the sequence
model also gets ``[B, L, D]`` padded sequences with their ``key_padding_mask`` (True = padding).

* :class:`DLRM` (Naumov et al. 2019): bottom MLP on the dense features, pairwise dot products of all
  feature vectors, top MLP.
* :class:`DCNv2` (Wang et al. 2021): full-rank cross layers ``x_{l+1} = x0 ⊙ (W x_l + b) + x_l`` over
  the concatenated input, then a deep MLP (the "stacked" form).
* :class:`BST` (Chen et al. 2019, Behaviour Sequence Transformer): item and category embeddings of
  the history plus the target item as the last token, a learned position embedding, an
  ``nn.TransformerEncoder``, and an MLP over the target token's output and the pooled user features.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..errors import InvalidInputError
from ..jagged import JaggedTensor


ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU}
BST_HEADS = 2  # attention heads of the training job's BST: its dim must be a multiple (TrainConfig.validate)


def mlp(sizes: list[int], last_activation: bool = False, activation: str = "relu") -> nn.Sequential:
    """Linear layers of the given widths with ``activation`` (ReLU or GELU) between them (and after the last,
    if asked)."""
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2 or last_activation:
            layers.append(ACTIVATIONS[activation]())
    return nn.Sequential(*layers)


class DLRM(nn.Module):
    """DLRM's dense half: bottom MLP → dot interaction with the F pooled embeddings → top MLP → logit."""

    def __init__(self, dense_in: int, num_sparse: int, dim: int, bottom: tuple[int, ...] = (256, 128),
                 top: tuple[int, ...] = (256, 128)) -> None:
        super().__init__()
        self.bottom = mlp([dense_in, *bottom, dim], last_activation=True)
        n = num_sparse + 1
        self._pairs = torch.triu_indices(n, n, offset=1)
        self.top = mlp([dim + n * (n - 1) // 2, *top, 1])

    def forward(self, dense: torch.Tensor, pooled: torch.Tensor) -> torch.Tensor:
        """``[B]`` logits from ``dense`` ``[B, dense_in]`` and ``pooled`` ``[B, F, D]``."""
        d = self.bottom(dense)
        feats = torch.cat([d.unsqueeze(1), pooled], 1)
        inter = torch.bmm(feats, feats.transpose(1, 2))[:, self._pairs[0], self._pairs[1]]
        return self.top(torch.cat([d, inter], 1)).squeeze(1)


class DCNv2(nn.Module):
    """DCNv2's dense half: ``layers`` full-rank cross layers over [dense, pooled...], then an MLP → logit."""

    def __init__(self, dense_in: int, num_sparse: int, dim: int, layers: int = 3,
                 deep: tuple[int, ...] = (256, 128)) -> None:
        super().__init__()
        width = dense_in + num_sparse * dim
        self.cross = nn.ModuleList(nn.Linear(width, width) for _ in range(layers))
        self.deep = mlp([width, *deep, 1])

    def forward(self, dense: torch.Tensor, pooled: torch.Tensor) -> torch.Tensor:
        """``[B]`` logits."""
        x0 = torch.cat([dense, pooled.flatten(1)], 1)
        x = x0
        for layer in self.cross:
            x = x0 * layer(x) + x
        return self.deep(x).squeeze(1)


class BST(nn.Module):
    """Behaviour Sequence Transformer's dense half.

    Inputs: ``hist`` ``[B, L, D]`` (item + category embedding of each past event, summed), its
    ``mask`` ``[B, L]`` (True = padding), ``target`` ``[B, D]`` (the candidate's item + category
    embedding) and ``user`` ``[B, U]`` (pooled user features, flattened). ``activation`` (``relu`` or
    ``gelu``) is that of the encoder's feed-forward block and of the top MLP: GELU's gradient is continuous,
    so a score moving by a rounding error cannot flip a unit on or off and change a row's gradient whole.
    """

    def __init__(self, dim: int, max_len: int, user_width: int, heads: int = BST_HEADS, layers: int = 1,
                 top: tuple[int, ...] = (128, 64), activation: str = "relu") -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise InvalidInputError(f"activation {activation!r}: choose one of {tuple(ACTIVATIONS)}")
        if dim % heads:  # torch would assert it in its own words
            raise InvalidInputError(f"dim must be a multiple of the BST's {heads} attention heads, got {dim}")
        self.position = nn.Embedding(max_len + 1, dim)
        block = nn.TransformerEncoderLayer(dim, heads, dim_feedforward=2 * dim, dropout=0.0, batch_first=True,
                                           activation=activation)
        self.encoder = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.top = mlp([2 * dim + user_width, *top, 1], activation=activation)

    def forward(self, hist: torch.Tensor, mask: torch.Tensor, target: torch.Tensor,
                user: torch.Tensor) -> torch.Tensor:
        """``[B]`` logits. ``hist`` may be padded to any length up to ``max_len``: the target token always
        takes the last position (``max_len``), so with the padding masked the logits do not depend on it."""
        pos = self.position.weight
        tokens = torch.cat([hist + pos[: hist.shape[1]].unsqueeze(0), (target + pos[-1]).unsqueeze(1)], 1)
        pad = torch.cat([mask, torch.zeros_like(mask[:, :1])], 1)
        out = self.encoder(tokens, src_key_padding_mask=pad)
        valid = (~pad).unsqueeze(2).to(out.dtype)
        pooled_hist = (out * valid).sum(1) / valid.sum(1).clamp(min=1)
        return self.top(torch.cat([out[:, -1], pooled_hist, user], 1)).squeeze(1)


def bst_inputs(emb: dict[str, Any], max_len: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """:class:`BST`'s inputs from the sequence lookups ``{key: JaggedTensor}`` of any backend: the history
    (item + category embedding of each event, summed on the jagged rows, then the newest ``max_len``
    events as a ``[B, L, D]`` padded view, ``L`` the batch's longest history capped at ``max_len``), its
    padding mask, the target and the user embedding."""
    hist_item, hist_cat = emb["hist_item"], emb["hist_cat"]
    lengths = hist_item.lengths()
    _check_aligned(emb, lengths)
    summed = JaggedTensor(hist_item.values() + hist_cat.values(), lengths=lengths)
    # Padded to the longest history, not to max_len: attention is quadratic in L, and a large max_len
    # padded every batch to it (max_len 100000 attended over 100001 tokens and hung the run).
    longest = int(lengths.max()) if lengths.numel() else 0
    hist, mask = summed.to_padded(min(longest, max_len), keep="last")
    target = emb["target_item"].values() + emb["target_cat"].values()
    return hist, mask, target, emb["user_id"].values()


def _check_aligned(emb: dict[str, Any], lengths: torch.Tensor) -> None:
    """The rows :func:`bst_inputs` adds up must belong together: both histories of a sample as long as
    each other, and one target item, target category and user per sample. Rows are summed as flat
    tensors, so histories of equal total but different per-sample lengths would otherwise mix one
    sample's items with another's categories in silence."""
    if not torch.equal(emb["hist_cat"].lengths(), lengths):
        raise InvalidInputError("bst_inputs: hist_item and hist_cat differ in length for some samples (their "
                                "events must pair up, one category per item)")
    for key in ("target_item", "target_cat", "user_id"):
        got = emb[key].lengths()
        if got.numel() != lengths.numel() or bool((got != 1).any()):
            raise InvalidInputError(f"bst_inputs: {key} must hold exactly one ID per sample (lengths all 1 over "
                                    f"the batch's {lengths.numel()} samples)")
