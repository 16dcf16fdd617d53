"""Running a checked sweep (``_sweep.load_sweep``): every run through rl-launch's queue, or as
Ray Tune trials, and the table of their results.

Apart from ``_sweep`` so that the engines' modules (``_ray_sweep``, ``_sweep_run``), which read
the sweep's files through ``_sweep``, are imported by this module and never import it back.
"""

from __future__ import annotations

from pathlib import Path

from rl_launch import ExperimentsSummary, run_experiments

from ._sweep import SWEEP_FILE, Sweep, write_json

__all__ = ["run_sweep", "sweep_report"]


def run_sweep(sweep: Sweep, address: str | None = None) -> ExperimentsSummary:
    """Run every (variant, seed) of ``sweep`` through the queue, ``sweep.n_slots`` at a time,
    or as Ray Tune trials on the cluster at ``address`` (``sweep.engine == "ray"``; see
    ``_ray_sweep.run_ray_sweep``).

    The queue prints each run as it starts and ends; a failed run does not stop the others.
    Ctrl-C stops every run (and what it started) and propagates as KeyboardInterrupt.
    """
    if address is not None and sweep.engine != "ray":
        raise ValueError("an address is for the ray engine's cluster (--engine ray)")
    if not sweep.resumed:  # (a continued sweep keeps the base configuration it started with)
        write_json(
            sweep.sweep_dir / SWEEP_FILE,
            {"title": sweep.title, "spec": sweep.spec, "base_config": sweep.base_config},
        )
    if sweep.engine == "ray":
        from ._ray_sweep import run_ray_sweep  # (needs ray: rl-suite[ray])

        return run_ray_sweep(sweep, address)
    return run_experiments(
        Path(__file__).with_name("_sweep_run.py"),  # (a script: not imported here)
        sweep.affinity_code,
        sweep.sweep_dir.name,
        runs_per_setting=sweep.seeds,
        variants=sweep.variants,
        log_dirs=sweep.log_dirs,
        common_args=[sweep.sweep_dir / SWEEP_FILE],
        log_root=sweep.sweep_dir.parent,
    )


def sweep_report(summary: ExperimentsSummary) -> str:
    """Per variant and seed, the steps run and the last logged average return; then the
    failed runs with their stderr logs."""
    from ._plot import read_progress

    lines = [f"{'variant':<24} {'seed':>4} {'steps':>9} {'final return':>13}  status"]
    for run in summary.runs:
        try:
            progress = read_progress(run.run_dir)
        except (FileNotFoundError, ValueError):
            progress = {}  # (a run that failed before its first log row)
        # (no ReturnAverage column: no episode ended; the steps still count)
        steps, final = (
            f"{progress[column][-1]:{spec}}" if column in progress else "-"
            for column, spec in (("CumSteps", ".0f"), ("ReturnAverage", ".1f"))
        )
        variant = run.log_dir.relative_to(summary.exp_dir).as_posix()
        status = "ok" if run.ok else f"FAILED (exit code {run.returncode})"
        lines.append(f"{variant:<24} {run.run_ID:>4} {steps:>9} {final:>13}  {status}")
    for run in summary.failed:
        lines.append(f"failed: {run.run_dir} (see {run.stderr})")
    return "\n".join(lines)
