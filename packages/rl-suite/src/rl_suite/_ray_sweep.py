"""Sweeps on Ray Tune (``rl-suite sweep CONFIG --engine ray``; see the README's "Sweeps").

Each (variant, seed) of the sweep is a Tune trial of ``_trial``, a function trainable that
builds the run from the sweep directory as the local queue's runs do (``_sweep_run``), trains
it into the same run directory, and at every log interval hands Tune the row just written to
``progress.csv`` with a checkpoint of the run (``TuneCheckpointer``). A trial whose process
dies continues from its last checkpoint (``max_failures`` times); a sweep that was stopped
continues when it is started again (``Tuner.restore``).

ray is imported inside the functions only: rl-suite works without it.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import platform
import shutil
import tempfile
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rl_launch import STDERR_FILE, STDOUT_FILE, ExperimentsSummary, RunResult, save_variant
from rl_runners import Checkpointer, find_checkpoint, load_checkpoint, logger

from ._sweep import RAY_MISSING, SWEEP_FILE, TUNE_DIR, Sweep, write_json
from ._sweep_run import RUN_INFO_FILE, run_affinity, run_config
from ._trainer import resume, train

__all__ = ["TuneCheckpointer", "run_ray_sweep"]


def _import_ray() -> tuple[Any, Any]:
    try:
        import ray
        from ray import tune
    except ImportError as error:
        raise ImportError(RAY_MISSING) from error
    return ray, tune


def _number(text: str) -> float | str:
    try:
        return float(text)
    except ValueError:
        return text


def last_row(progress: Path) -> dict[str, float | str]:
    """The last row of ``progress.csv`` (empty cells left out), as Tune's metrics."""
    with open(progress, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    if len(rows) < 2:
        return {}
    return {
        key: _number(value) for key, value in zip(rows[0], rows[-1], strict=False) if value != ""
    }


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)  # (the snapshot is replaced, never rewritten, in place)
    except OSError:  # another filesystem
        shutil.copy2(source, target)


class TuneCheckpointer(Checkpointer):
    """Writes the run directory's snapshots as its ``snapshot_mode`` says, and at every log
    interval hands Tune a checkpoint of the same state (the snapshot file and what lies
    beside it: sampler state, replay buffer) with the ``progress.csv`` row just written.
    Each snapshot is serialized once: Tune gets links to the run directory's files, or, where
    the snapshot mode keeps none, files of its own."""

    def __init__(self, run_dir: Path, replay: bool = False):
        super().__init__(replay)
        self.run_dir = run_dir

    # (runner: rl_runners' CheckpointedRunner protocol, which that package does not export)
    def save(self, runner: Any, itr: int, always: bool = False) -> Path | None:
        from ray import tune

        kept = logger.snapshot_path(itr, always)  # the run directory's own snapshot, if any
        with tempfile.TemporaryDirectory(prefix="rl-suite-checkpoint-") as staging:
            files = self.write(runner, kept or Path(staging) / "params.pt", itr)
            if kept is not None:
                for file in files:
                    _link_or_copy(file, Path(staging) / file.name)
            row = last_row(self.run_dir / "progress.csv")
            tune.report(row, checkpoint=tune.Checkpoint.from_directory(staging))
        return kept


def _slot(cpus: int) -> dict[str, Any]:
    """A trial's share of its machine as ``run_affinity`` takes a run slot: ``cpus`` torch
    threads and sampler workers, none pinned (Ray reserves CPUs, it does not pin them)."""
    return {
        "master_cpus": None,
        "master_torch_threads": cpus,
        "worker_torch_threads": 1,
        "set_affinity": False,
        "workers_cpus": [None] * cpus,
    }


@contextlib.contextmanager
def _output_to(run_dir: Path) -> Iterator[None]:
    """The run's prints into its ``stdout.log`` and ``stderr.log``, as with the local queue
    (an error's traceback too), not onto the console among Tune's status."""
    run_dir.mkdir(parents=True, exist_ok=True)
    with (
        open(run_dir / STDOUT_FILE, "a", encoding="utf-8") as out,
        open(run_dir / STDERR_FILE, "a", encoding="utf-8") as err,
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        try:
            yield
        except BaseException:
            traceback.print_exc()
            raise


def _read_info(info_file: Path) -> dict[str, Any]:
    """A trial's ``sweep_run.json``: its attempts and, once it ended well, ``finished``."""
    return json.loads(info_file.read_text(encoding="utf-8")) if info_file.is_file() else {}


def _trial(config: dict[str, Any], sweep_dir: str, cpu_per_run: int) -> None:
    """One run of the sweep, ``config["variant"]`` with seed ``config["seed"]``: trained into
    ``<sweep_dir>/<variant>/run_<seed>``, or continued there from Tune's checkpoint."""
    from ray import tune

    log_dir = Path(sweep_dir) / config["variant"]
    run_dir = log_dir / f"run_{config['seed']}"
    settings = run_config(Path(sweep_dir) / SWEEP_FILE, log_dir, config["seed"])
    affinity = run_affinity(settings, _slot(cpu_per_run))
    checkpointer = TuneCheckpointer(run_dir, replay=settings["runner"]["checkpoint_replay"])
    checkpoint = tune.get_checkpoint()
    if checkpoint is None:  # a first start, or an earlier one that died before a checkpoint
        shutil.rmtree(run_dir, ignore_errors=True)
    info_file = run_dir / RUN_INFO_FILE
    info = {"attempts": [], **_read_info(info_file)}
    attempt = {"node": platform.node(), "pid": os.getpid(), "started": time.time()}
    info.update(affinity=affinity, attempts=[*info["attempts"], attempt])
    with _output_to(run_dir):
        if checkpoint is None:
            write_json(info_file, info)
            train(settings, log_dir, affinity=affinity, checkpointer=checkpointer)
        else:
            with checkpoint.as_directory() as saved:
                path = find_checkpoint(saved)
                attempt["resumed_at_steps"] = load_checkpoint(path)["cum_steps"]
                write_json(info_file, info)
                resume(run_dir, checkpoint=path, affinity=affinity, checkpointer=checkpointer)
    write_json(info_file, {**info, "finished": time.time()})


def _trial_name(trial: Any) -> str:
    return f"{trial.config['variant'].replace('/', '+')}.run_{trial.config['seed']}"


def _trial_dirname(trial: Any) -> str:
    return f"{_trial_name(trial)}.{trial.trial_id}"


def _run_name(trial: Any) -> str:
    return f"{trial.config['variant']}/run_{trial.config['seed']}"


def _console(tune: Any, max_failures: int) -> Any:
    """A Tune callback that prints a line as each trial starts, dies, fails or finishes, as the
    local queue does for its runs (in place of Tune's tables)."""

    class SweepConsole(tune.Callback):
        def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            print(f"started {_run_name(trial)}", flush=True)

        def on_trial_recover(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            print(
                f"{_run_name(trial)} died: it continues from its last checkpoint (retry "
                f"{trial.num_failures} of {max_failures})",
                flush=True,
            )

        def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            print(f"FAILED: {_run_name(trial)}", flush=True)

        def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            host = (trial.last_result or {}).get("hostname", "?")
            print(f"finished: {_run_name(trial)} (on {host})", flush=True)

    return SweepConsole()


def _tuner(sweep: Sweep, tune: Any) -> Any:
    """A new Tuner for the sweep's trials, or the stopped one restored."""
    for variant, name in zip(sweep.variants, sweep.log_dirs, strict=True):
        save_variant(variant, sweep.sweep_dir / name)
    trainable = tune.with_resources(
        tune.with_parameters(_trial, sweep_dir=str(sweep.sweep_dir), cpu_per_run=sweep.cpu_per_run),
        {"cpu": sweep.cpu_per_run, "gpu": sweep.gpu_per_run},
    )
    experiment = sweep.sweep_dir / TUNE_DIR
    if sweep.resumed:
        if not tune.Tuner.can_restore(str(experiment)):
            raise FileExistsError(
                f"{experiment} holds no Tune state to continue from (the sweep stopped before "
                "Tune saved any): choose another log_dir (or --log-dir)"
            )
        return tune.Tuner.restore(str(experiment), trainable, resume_errored=True)
    return tune.Tuner(
        trainable,
        param_space={
            "variant": tune.grid_search(sweep.log_dirs),
            "seed": tune.grid_search(list(range(sweep.seeds))),
        },
        tune_config=tune.TuneConfig(
            trial_name_creator=_trial_name, trial_dirname_creator=_trial_dirname
        ),
        run_config=tune.RunConfig(
            name=TUNE_DIR,
            storage_path=str(sweep.sweep_dir),
            failure_config=tune.FailureConfig(max_failures=sweep.max_failures),
            checkpoint_config=tune.CheckpointConfig(num_to_keep=1),
            callbacks=[_console(tune, sweep.max_failures)],
            verbose=0,
        ),
    )


def _summary(sweep: Sweep, results: Any) -> ExperimentsSummary:
    """The trials as the local queue reports its runs (exit code 1: the trial failed, its
    error appended to the run's ``stderr.log``); KeyboardInterrupt if some did not end."""
    runs, stopped = [], 0
    for result in results:
        log_dir = sweep.sweep_dir / result.config["variant"]
        run = RunResult(log_dir, result.config["seed"], 0, 0 if result.error is None else 1)
        if result.error is not None:
            run.run_dir.mkdir(parents=True, exist_ok=True)
            with open(run.stderr, "a", encoding="utf-8") as f:
                f.write(f"Ray Tune: the trial failed: {result.error}\n")
        elif "finished" not in _read_info(run.run_dir / RUN_INFO_FILE):
            stopped += 1
        runs.append(run)
    if stopped:
        raise KeyboardInterrupt(f"{stopped} trial(s) stopped before the end")
    order = {sweep.sweep_dir / name: i for i, name in enumerate(sweep.log_dirs)}
    runs.sort(key=lambda run: (order[run.log_dir], run.run_ID))
    return ExperimentsSummary(sweep.sweep_dir, tuple(runs))


def run_ray_sweep(sweep: Sweep, address: str | None = None) -> ExperimentsSummary:
    """Run every (variant, seed) of ``sweep`` as a Tune trial with ``cpu_per_run`` CPUs and
    ``gpu_per_run`` GPUs, on the Ray cluster at ``address`` (by default: the one this process
    joined, else the one `ray start` started on this machine, else a new one here).

    A sweep directory that holds this sweep, stopped, is continued. Ctrl-C stops the trials
    once Tune has saved its state, then raises KeyboardInterrupt.
    """
    ray, tune = _import_ray()
    # Tune saves its state each time a trial's older checkpoint is deleted (num_to_keep=1), so
    # that a restore never points at a deleted one, and warns that this happens often.
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    started = not ray.is_initialized()
    if started:
        ray.init(address=address)
    try:
        results = _tuner(sweep, tune).fit()
    finally:
        if started:
            ray.shutdown()
    return _summary(sweep, results)
