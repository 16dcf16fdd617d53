"""Learning curves from run directories' ``progress.csv`` (matplotlib, an optional dependency:
``pip install rl-suite[plot]``)."""

from __future__ import annotations

import csv
import math
from pathlib import Path

__all__ = ["have_matplotlib", "plot_runs", "read_progress"]


def have_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def read_progress(run_dir: str | Path) -> dict[str, list[float]]:
    """The columns of ``run_dir/progress.csv`` as floats (empty cells as NaN)."""
    path = Path(run_dir) / "progress.csv"
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir} has no progress.csv")
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise ValueError(f"{path} has no rows yet")
    return {
        key: [float(row[key]) if row.get(key) not in (None, "") else math.nan for row in rows]
        for key in rows[0]
    }


def plot_runs(
    run_dirs: list[str | Path], out: str | Path, y: str = "ReturnAverage", x: str = "CumSteps"
) -> Path:
    """Draw ``y`` against ``x`` for every run on one figure (with ``y``'s Std column as a band
    when there is one) and save it as ``out`` (PNG); returns the path."""
    if not run_dirs:
        raise ValueError("plot needs at least one run directory")
    curves = []
    for run_dir in run_dirs:
        progress = read_progress(run_dir)
        for column in (x, y):
            if column not in progress:
                raise KeyError(
                    f"{run_dir}/progress.csv has no column {column!r}; it has {', '.join(progress)}"
                )
        curves.append((Path(run_dir), progress))
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only: no display needed
        import matplotlib.pyplot as plt
    except ImportError as error:
        raise ImportError(
            "plotting needs matplotlib: pip install matplotlib (or rl-suite[plot])"
        ) from error
    figure, axes = plt.subplots(figsize=(7, 4.5))
    std_column = y.removesuffix("Average") + "Std"
    for run_dir, progress in curves:
        label = f"{run_dir.parent.name}/{run_dir.name}"
        (line,) = axes.plot(progress[x], progress[y], label=label)
        if std_column != y and std_column in progress:
            low = [m - s for m, s in zip(progress[y], progress[std_column], strict=True)]
            high = [m + s for m, s in zip(progress[y], progress[std_column], strict=True)]
            axes.fill_between(progress[x], low, high, color=line.get_color(), alpha=0.2)
    axes.set_xlabel(x)
    axes.set_ylabel(y)
    axes.grid(alpha=0.3)
    axes.legend(fontsize="small")
    figure.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=100)
    plt.close(figure)
    return out
