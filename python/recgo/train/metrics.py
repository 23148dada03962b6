"""Exact ranking and calibration metrics for binary click labels.

``auc`` is the exact area under the ROC curve (the Mann-Whitney U statistic with tied scores
counted as one half, the definition ``sklearn.metrics.roc_auc_score`` computes), not a binned
approximation: with the AUC gaps of 0.002 this project compares, binning error would matter.
"""

from __future__ import annotations

import math

import torch


def auc(scores: torch.Tensor, labels: torch.Tensor) -> float:
    """Exact ROC AUC of ``scores`` against 0/1 ``labels`` (ties averaged). NaN if one class is absent
    or a score is NaN (a diverged model: NaN sorted last made up an AUC near 0.5).

    Raises:
        ValueError: the lengths differ, or a label is not 0 or 1."""
    s = scores.detach().reshape(-1).to(torch.float64)
    y = labels.detach().reshape(-1).to(torch.float64)
    if s.numel() != y.numel():
        raise ValueError(f"auc: {s.numel()} scores for {y.numel()} labels")
    if bool(((y != 0) & (y != 1)).any()):
        raise ValueError(f"auc: labels must be 0 or 1, got {sorted(set(y[(y != 0) & (y != 1)].tolist()))[:5]}")
    if bool(s.isnan().any()):
        return math.nan
    pos = float(y.sum())
    neg = y.numel() - pos
    if pos == 0 or neg == 0:
        return math.nan
    order = torch.argsort(s)
    s_sorted, y_sorted = s[order], y[order]
    # Average rank (1-based) of each tie group: the rank sum of positives gives U directly.
    _, inverse, counts = torch.unique_consecutive(s_sorted, return_inverse=True, return_counts=True)
    ends = torch.cumsum(counts, 0).to(torch.float64)
    avg_rank = ends - (counts.to(torch.float64) - 1) / 2
    rank_sum = float((avg_rank[inverse] * y_sorted).sum())
    return (rank_sum - pos * (pos + 1) / 2) / (pos * neg)


def one_class_note(labels: torch.Tensor) -> str:
    """Why the AUC of a validation set with these 0/1 ``labels`` is undefined ("" when both classes are
    there): what a report shows instead of a NaN."""
    n = labels.numel()
    pos = int((labels == 1).sum())
    if 0 < pos < n:
        return ""
    if n == 0:
        return "the validation split is empty"
    return (f"the validation split's {n} samples are all labelled {1 if pos else 0} (AUC needs both classes): "
            "give more (or more varied) data, so that the held-out samples hold both classes")


def log_loss(logits: torch.Tensor, labels: torch.Tensor) -> float:
    """Mean binary cross-entropy of ``logits`` (pre-sigmoid) against 0/1 ``labels``, in float64."""
    x = logits.detach().reshape(-1).to(torch.float64)
    y = labels.detach().reshape(-1).to(torch.float64)
    sp = torch.nn.functional.softplus
    # per label, so an infinite logit gives 0 or inf (torch's max(x, 0) - x·y gave inf - inf = NaN)
    per = torch.where(y == 1, sp(-x), torch.where(y == 0, sp(x), y * sp(-x) + (1 - y) * sp(x)))
    return float(per.mean())
