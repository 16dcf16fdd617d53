"""Learning curves from run directories' ``progress.csv``, one per run or, for a sweep, one per
variant over its seeds (matplotlib, an optional dependency: ``pip install rl-suite[plot]``)."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from rl_launch import VARIANT_FILE
from rl_runners import atomic_write

__all__ = [
    "SeedBand",
    "have_matplotlib",
    "is_sweep",
    "plot_runs",
    "plot_sweep",
    "read_progress",
    "seed_band",
    "sweep_runs",
]


def have_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def read_progress(run_dir: str | Path) -> dict[str, list[float]]:
    """The columns of ``run_dir/progress.csv`` as floats (empty or missing cells as NaN).
    A last line without its line end (cut short when the run was killed) is left out; a
    damaged file is a ValueError that names it and the line."""
    path = Path(run_dir) / "progress.csv"
    if not path.is_file():
        if not Path(run_dir).is_dir():
            raise FileNotFoundError(
                f"{run_dir} is not a directory: give a run directory (`rl-suite train` prints "
                "the one it makes)"
            )
        raise FileNotFoundError(
            f"{run_dir} has no progress.csv: nothing was logged there (give a run directory "
            "that `rl-suite train` or a sweep wrote)"
        )
    redo = "restore it, or train the run again"
    try:
        text = path.read_text(encoding="utf-8")
        lines = list(csv.reader(io.StringIO(text[: text.rfind("\n") + 1])))
    except (ValueError, csv.Error) as error:  # (not UTF-8 text, or not CSV)
        raise ValueError(
            f"{path} is not a readable CSV file (damaged?): {error}; {redo}"
        ) from error
    if len(lines) < 2:
        raise ValueError(f"{path} has no rows yet: the run has not logged its first iteration")
    header = lines[0]
    columns: dict[str, list[float]] = {key: [] for key in header}
    for number, row in enumerate(lines[1:], start=2):
        if len(row) > len(header):
            raise ValueError(
                f"{path} line {number} has {len(row)} cells for {len(header)} columns "
                f"(damaged?); {redo}"
            )
        for key, cell in zip(header, row + [""] * (len(header) - len(row)), strict=True):
            try:
                columns[key].append(float(cell) if cell else math.nan)
            except ValueError:
                raise ValueError(
                    f"{path} line {number}, column {key}: {cell!r} is not a number "
                    f"(damaged?); {redo}"
                ) from None
    return columns


def _progress_with(run_dir: str | Path, *columns: str) -> dict[str, list[float]]:
    progress = read_progress(run_dir)
    for column in columns:
        if column not in progress:
            raise KeyError(
                f"{run_dir}/progress.csv has no column {column!r}; it has {', '.join(progress)}"
            )
    return progress


def plot_runs(
    run_dirs: list[str | Path], out: str | Path, y: str = "ReturnAverage", x: str = "CumSteps"
) -> Path:
    """Draw ``y`` against ``x`` for every run on one figure (with ``y``'s Std column as a band
    when there is one) and save it as ``out`` (PNG); returns the path."""
    if not run_dirs:
        raise ValueError("plot needs at least one run directory")
    curves = [(Path(run_dir), _progress_with(run_dir, x, y)) for run_dir in run_dirs]
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(7, 4.5))
    std_column = y.removesuffix("Average") + "Std"
    for run_dir, progress in curves:
        label = f"{run_dir.parent.name}/{run_dir.name}"
        (line,) = axes.plot(progress[x], progress[y], label=label)
        if std_column != y and std_column in progress:
            low = [m - s for m, s in zip(progress[y], progress[std_column], strict=True)]
            high = [m + s for m, s in zip(progress[y], progress[std_column], strict=True)]
            axes.fill_between(progress[x], low, high, color=line.get_color(), alpha=0.2)
    return _save(plt, figure, axes, out, x, y)


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only: no display needed
        import matplotlib.pyplot as plt
    except ImportError as error:
        raise ImportError(
            "plotting needs matplotlib: pip install matplotlib (or rl-suite[plot])"
        ) from error
    return plt


def _save(plt: Any, figure: Any, axes: Any, out: str | Path, x: str, y: str) -> Path:
    axes.set_xlabel(x)
    axes.set_ylabel(y)
    axes.grid(alpha=0.3)
    axes.legend(fontsize="small")
    figure.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    image_format = out.suffix.lstrip(".") or "png"
    atomic_write(out, lambda f: figure.savefig(f, dpi=100, format=image_format))  # (whole)
    plt.close(figure)
    return out


# ----------------------------------------------------------------------------- sweeps
class SeedBand(NamedTuple):
    """One variant's curve: the mean over its runs (seeds) and their min and max, at ``steps``."""

    steps: np.ndarray
    mean: np.ndarray
    low: np.ndarray
    high: np.ndarray
    n_runs: int


def _run_number(run_dir: Path) -> tuple[int, str]:
    suffix = run_dir.name.removeprefix("run_")
    return (int(suffix), "") if suffix.isdigit() else (-1, run_dir.name)


def sweep_runs(sweep_dir: str | Path) -> dict[str, list[Path]]:
    """Every run of a sweep, by variant: each directory under ``sweep_dir`` that holds a
    ``variant.json`` (named by its path below ``sweep_dir``), with its ``run_*`` directories
    that hold a ``progress.csv``.  Variants without such a run are left out."""
    root = Path(sweep_dir)
    groups = {}
    for variant_file in sorted(root.rglob(VARIANT_FILE)):
        runs = [d for d in variant_file.parent.glob("run_*") if (d / "progress.csv").is_file()]
        if runs:
            groups[variant_file.parent.relative_to(root).as_posix()] = sorted(runs, key=_run_number)
    return groups


def is_sweep(path: str | Path) -> bool:
    """A directory with no ``progress.csv`` of its own and a ``variant.json`` below it."""
    path = Path(path)
    return path.is_dir() and not (path / "progress.csv").exists() and any(path.rglob(VARIANT_FILE))


def seed_band(run_dirs: list[Path], y: str = "ReturnAverage", x: str = "CumSteps") -> SeedBand:
    """The mean of ``y`` over the runs, and its min-max band, against ``x``.

    Runs may log at different steps (another batch size, a run that stopped early or is still
    going): each run is interpolated linearly onto every step any of them logged within the
    range all of them cover (from the latest first row to the earliest last row), so every
    point averages every run and none is extrapolated.  Rows without a value are skipped.
    """
    series = []
    for run_dir in run_dirs:
        progress = _progress_with(run_dir, x, y)
        xs, ys = np.asarray(progress[x]), np.asarray(progress[y])
        keep = ~(np.isnan(xs) | np.isnan(ys))
        if keep.any():
            order = np.argsort(xs[keep], kind="stable")
            series.append((xs[keep][order], ys[keep][order]))
    if not series:
        raise ValueError(f"no {y} values in {', '.join(map(str, run_dirs))}")
    start, stop = max(xs[0] for xs, _ in series), min(xs[-1] for xs, _ in series)
    steps = np.unique(np.concatenate([xs[(xs >= start) & (xs <= stop)] for xs, _ in series]))
    if not len(steps):
        raise ValueError(f"the runs {', '.join(map(str, run_dirs))} share no range of {x}")
    values = np.stack([np.interp(steps, xs, ys) for xs, ys in series])
    return SeedBand(steps, values.mean(0), values.min(0), values.max(0), len(series))


def plot_sweep(
    sweep_dir: str | Path, out: str | Path, y: str = "ReturnAverage", x: str = "CumSteps"
) -> Path:
    """One curve per variant of a sweep (``sweep_runs``): the mean of ``y`` over its seeds,
    with a band from their min to their max (``seed_band``); saved as ``out`` (PNG)."""
    groups = sweep_runs(sweep_dir)
    if not groups:
        raise FileNotFoundError(
            f"{sweep_dir} holds no sweep runs (run_*/progress.csv beside a variant.json)"
        )
    bands = {name: seed_band(runs, y, x) for name, runs in groups.items()}
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(7, 4.5))
    for name, band in bands.items():
        (line,) = axes.plot(band.steps, band.mean, label=f"{name}: mean of {band.n_runs} seeds")
        axes.fill_between(band.steps, band.low, band.high, color=line.get_color(), alpha=0.2)
    axes.set_title(f"{Path(sweep_dir).resolve().name}: mean over seeds, band from min to max")
    return _save(plt, figure, axes, out, x, y)
