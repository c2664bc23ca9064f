"""The learning benches' figure: held-out success against generations (`bench learning`) or user
turns (`bench live`), mean and band over seeds, one line per arm (matplotlib, written as a PNG)."""

from __future__ import annotations

from pathlib import Path

ARM_LABELS = {
    "grpo": "GRPO only (w_opd=0)",
    "opd": "OPD only (w_grpo=0)",
    "hybrid": "GRPO + OPD",
    "prm": "PRM only (Binary RL)",
    "combined": "PRM + OPD (combined)",
}
ARM_COLORS = {
    "grpo": "tab:blue",
    "opd": "tab:orange",
    "hybrid": "tab:green",
    "prm": "tab:purple",
    "combined": "tab:red",
}
"""One colour per arm, so figures of different subsets of arms read alike."""


def plot_learning_curves(
    bands: dict[str, list[tuple[int, float, float, float]]],
    path: Path,
    title: str,
    seeds: int,
    xlabel: str = "generations (rollouts sampled for training)",
) -> Path:
    """One line (mean) and a shaded min-max band per arm; returns `path`."""
    try:
        import matplotlib
    except ImportError as exc:  # the `dev` extra installs it
        raise RuntimeError("the learning bench's figure needs matplotlib: pip install matplotlib") from exc
    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    figure, axes = plt.subplots(figsize=(6.4, 4.0), dpi=120)
    for arm, band in bands.items():
        if not band:
            continue
        xs = [point[0] for point in band]
        (line,) = axes.plot(
            xs,
            [point[1] for point in band],
            marker="o",
            label=ARM_LABELS.get(arm, arm),
            color=ARM_COLORS.get(arm),
        )
        axes.fill_between(xs, [p[2] for p in band], [p[3] for p in band], alpha=0.2, color=line.get_color())
    axes.set_xlabel(xlabel)
    axes.set_ylabel("held-out success (env evaluate, pass@1)")
    axes.set_title(f"{title} (mean, min-max band over {seeds} seed{'s' if seeds != 1 else ''})", fontsize=9)
    axes.set_ylim(-0.02, 1.02)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
    return path
