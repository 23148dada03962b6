"""PNG plots of plans and profiles (matplotlib, Agg backend; ``pip install 'recgo[plots]'``)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Mapping

from .._extras import require

if TYPE_CHECKING:
    from ._plan import Plan
    from ._profile import Profile


def require_matplotlib() -> None:
    """Raise MissingExtraError (naming ``recgo[plots]``) when matplotlib is not installed."""
    require("matplotlib", "plotting a plan (pass --no-plots / plots=False to skip)")


def _pyplot():
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_gpu_costs(plans: Mapping[str, "Plan"], path: str | os.PathLike[str], title: str = "") -> None:
    """Grouped bars of each plan's predicted per-GPU time (ms/step, linear scale from 0), one group
    per GPU rank, with the legend outside the axes so it never covers a bar."""
    plt = _pyplot()
    names = list(plans)
    ngpu = max(len(p.predicted["gpu_seconds"]) for p in plans.values())
    width = 0.8 / max(1, len(names))
    fig, ax = plt.subplots(figsize=(min(16, max(7, 0.55 * ngpu + 3)), 4.2))
    for j, name in enumerate(names):
        secs = plans[name].predicted["gpu_seconds"]
        ax.bar([g + j * width for g in range(len(secs))], [s * 1e3 for s in secs], width, label=name)
    ax.set_xlabel("GPU rank")
    ax.set_ylabel("modeled embedding time (ms/step)")
    ax.set_ylim(bottom=0)
    step = max(1, ngpu // 32)
    ax.set_xticks([g + width * (len(names) - 1) / 2 for g in range(0, ngpu, step)],
                  [str(g) for g in range(0, ngpu, step)])
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0, frameon=False)
    ax.set_title(title or "Per-GPU modeled cost by strategy")
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def plot_cdfs(profile: "Profile", path: str | os.PathLike[str], top: int = 8) -> None:
    """Access CDFs (share of lookups vs share of rows, log x) of the ``top`` heaviest tables."""
    plt = _pyplot()
    tables = sorted(profile.tables, key=lambda t: -t["coverage"] * t["pooling"])[:top]
    fig, ax = plt.subplots(figsize=(7, 4))
    drawn = 0
    for t in tables:
        pts = [p for p in t["cdf"] or () if p["rows"] > 0]  # a table no sampled lookup reached has none
        if not pts:
            continue
        ax.plot([p["rows"] / t["rows"] for p in pts], [p["frac"] for p in pts], marker=".", label=t["name"])
        drawn += 1
    ax.set_xscale("log")
    ax.set_xlabel("share of rows (hottest first)")
    ax.set_ylabel("share of lookups")
    ax.set_title(f"Access CDF of the {len(tables)} heaviest tables")
    if drawn:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
