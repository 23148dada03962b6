"""PNG plots of plans and profiles (matplotlib, Agg backend)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Mapping

if TYPE_CHECKING:
    from ._core import Plan, Profile


def _pyplot():
    from ..errors import require_extra

    matplotlib = require_extra("matplotlib", "plots", "drawing plan and profile plots")

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_gpu_costs(plans: Mapping[str, "Plan"], path: str | os.PathLike[str], title: str = "") -> None:
    """Grouped bars of each plan's predicted per-GPU time (ms/step), one group per GPU rank."""
    plt = _pyplot()
    names = list(plans)
    ngpu = max(len(p.predicted["gpu_seconds"]) for p in plans.values())
    width = 0.8 / max(1, len(names))
    fig, ax = plt.subplots(figsize=(max(6, ngpu * 0.6 + 2), 4))
    for j, name in enumerate(names):
        secs = plans[name].predicted["gpu_seconds"]
        ax.bar([g + j * width for g in range(len(secs))], [s * 1e3 for s in secs], width, label=name)
    ax.set_xlabel("GPU rank")
    ax.set_ylabel("modeled embedding time (ms/step)")
    ax.set_yscale("log")
    ax.set_xticks([g + width * (len(names) - 1) / 2 for g in range(ngpu)], [str(g) for g in range(ngpu)])
    ax.legend(fontsize=7)
    ax.set_title(title or "Per-GPU modeled cost by strategy")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_cdfs(profile: "Profile", path: str | os.PathLike[str], top: int = 8) -> None:
    """Access CDFs (share of lookups vs share of rows, log x) of the ``top`` heaviest tables."""
    plt = _pyplot()
    tables = sorted(profile.tables, key=lambda t: -t["coverage"] * t["pooling"])[:top]
    fig, ax = plt.subplots(figsize=(6, 4))
    for t in tables:
        pts = [p for p in t["cdf"] if p["rows"] > 0]
        if not pts:
            continue
        ax.plot([p["rows"] / t["rows"] for p in pts], [p["frac"] for p in pts], marker=".", label=t["name"])
    ax.set_xscale("log")
    ax.set_xlabel("share of rows (hottest first)")
    ax.set_ylabel("share of lookups")
    ax.set_title(f"Access CDF of the {len(tables)} heaviest tables")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
