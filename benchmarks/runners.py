"""Runners: how much a fixed wall-clock budget buys with each way of running the same training.

    python benchmarks/runners.py                 # every case, 60 s per run: ~8 min
    python benchmarks/runners.py --case dqn-pong --budget 120
    python benchmarks/runners.py --quick         # a few seconds per run; checks it still works

Each run is the trainer's preset (rl_suite), in a fresh process (spawn), one at a time, stopped
by a Ctrl-C (SIGINT) after ``--budget`` seconds, or once it has logged a row with updates if
that comes later; its figures come from the last row it logged (``CumSteps`` and
``CumUpdates`` over ``CumTime``, evaluations off). Cases:

- ``dqn-cartpole``: the ``cartpole-dqn`` preset (8 envs x 32 steps, 128 updates of 64 per
  batch: replay ratio 32), serial sampler. ``MinibatchRl`` alternates sampling and training in
  one process; ``AsyncRl`` (``--async``) samples in a second process while the first trains,
  the optimizer paced to the same replay ratio.
- ``dqn-pong``: the ``atari-dqn`` preset on Pong (16 envs x 2 steps, 8 updates of 32 per batch,
  the Nature-size CNN) with the serial sampler, a 100k replay and learning from 2,000 steps
  (the preset's 1M replay and 50k start do not fit a short budget), the same two runners.
- ``ppo-cartpole``: the ``cartpole`` PPO preset (8 envs x 32 steps, 20 epochs), ``MinibatchRl``
  against ``SyncRl`` with 2 processes on gloo (``--processes 2``): each process samples its
  own batch and they all-reduce gradients, so an iteration covers twice the steps for the
  same number of (larger-batch) updates.

On this 2-core machine the second process has the second core: the ratios say what a second
core buys each way. On a machine with a GPU the same runners split differently: ``AsyncRl``
keeps the GPU training while CPU workers sample (rlpyt's reason for it), and ``SyncRl`` with
one process per GPU all-reduces over NCCL, so steps/s grow with the GPUs as long as sampling
is not the bottleneck.
"""

from __future__ import annotations

import argparse
import csv
import multiprocessing
import os
import signal
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROW_WAIT_S = 120.0  # past the budget, for a run's first row with updates
# case: (preset, env, settings for both runs, [(runner name, extra settings)] baseline first)
CASES = {
    "dqn-cartpole": (
        "cartpole-dqn",
        None,
        ["sampler.kind='serial'", "runner.log_interval_steps=1024"],
        [("MinibatchRl", []), ("AsyncRl", ["runner.asynchronous=True"])],
    ),
    "dqn-pong": (
        "atari-dqn",
        "atari:pong",
        [
            "sampler.kind='serial'",
            "sampler.max_decorrelation_steps=0",
            "algo_kwargs.replay_size=100000",
            "algo_kwargs.min_steps_learn=2000",
            "runner.log_interval_steps=320",
        ],
        [("MinibatchRl", []), ("AsyncRl", ["runner.asynchronous=True"])],
    ),
    "ppo-cartpole": (
        "cartpole",
        None,
        ["runner.log_interval_steps=2048"],
        [("MinibatchRl", []), ("SyncRl x2", ["runner.processes=2"])],
    ),
}


@dataclass
class Run:
    case: str
    runner: str
    steps: int
    updates: int
    seconds: float

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.seconds if self.seconds else float("nan")

    @property
    def updates_per_s(self) -> float:
        return self.updates / self.seconds if self.seconds else float("nan")


def run_for(case: str, runner: str, settings: list[str], budget: float) -> Run:
    """In a fresh process: train the case with ``settings`` until ``budget`` seconds have
    passed (then Ctrl-C), and read the last row."""
    import rl_suite

    preset, env, _, _ = CASES[case]
    config = rl_suite.make_config(preset, env=env, steps=10**9, seed=0)
    config = rl_suite.apply_overrides(
        config, ["runner.evaluate=False", "runner.snapshot_mode='none'", *settings]
    )
    log_dir = Path(tempfile.mkdtemp(prefix="rl-suite-runners-"))
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # the training's own log lines (and its children's) stay out of the table
    # Ctrl-C as in a terminal, even when this benchmark was started with SIGINT ignored (a
    # background job), which the spawned process inherits.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    progress = log_dir / f"run_{config['seed']}" / "progress.csv"
    done = threading.Event()
    threading.Thread(
        target=interrupt_when_updated, args=(progress, budget, done), daemon=True
    ).start()
    try:
        rl_suite.train(config, log_dir)
    except KeyboardInterrupt:
        pass
    finally:
        done.set()
    rows = logged_rows(progress)
    if not has_updated(rows):
        raise RuntimeError(
            f"{case} / {runner}: no row with updates logged within {budget + ROW_WAIT_S} s"
        )
    last = rows[-1]
    return Run(
        case, runner, int(last["CumSteps"]), int(last["CumUpdates"]), float(last["CumTime (s)"])
    )


def logged_rows(progress: Path) -> list[dict[str, str]]:
    if not progress.exists():
        return []
    with open(progress, newline="") as f:
        return list(csv.DictReader(f))


def has_updated(rows: list[dict[str, str]]) -> bool:
    """Whether the last row counts updates (False for a row still being written)."""
    updates = (rows[-1].get("CumUpdates") or "") if rows else ""
    return updates.isdigit() and int(updates) > 0


def interrupt_when_updated(progress: Path, budget: float, done: threading.Event) -> None:
    """Ctrl-C this process once ``budget`` seconds have passed and ``progress`` holds a row
    with updates, waiting up to ``ROW_WAIT_S`` more for one (a slow machine's comes late)."""
    start = time.monotonic()
    while not done.wait(0.5):
        elapsed = time.monotonic() - start
        if elapsed >= budget + ROW_WAIT_S or (
            elapsed >= budget and has_updated(logged_rows(progress))
        ):
            os.kill(os.getpid(), signal.SIGINT)
            return


def in_fresh_process(func, *args):
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(func, *args).result()


def print_load(when: str) -> None:
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"load average {when}: {load} (1, 5, 15 min) on {os.cpu_count()} cores", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny budgets: checks it works")
    parser.add_argument("--case", choices=[*CASES, "all"], default="all", help="default: all")
    parser.add_argument("--budget", type=float, default=60.0, help="seconds per run (60)")
    args = parser.parse_args()
    budget = 10.0 if args.quick else args.budget
    if args.quick:
        print("--quick: a few seconds per run; these numbers mean nothing.")
    cases = list(CASES) if args.case == "all" else [args.case]
    print_load("before")
    runs = []
    for case in cases:
        _, _, common, runners = CASES[case]
        if args.quick:  # a row within the tiny budget
            common = [*common, "runner.log_interval_steps=64"]
            if case == "dqn-pong":
                common.append("algo_kwargs.min_steps_learn=64")
        for runner, extra in runners:
            start = time.time()
            run = in_fresh_process(run_for, case, runner, [*common, *extra], budget)
            print(
                f"  {case} / {runner}: {run.steps:,} steps, {run.updates:,} updates in "
                f"{run.seconds:.1f} s ({time.time() - start:.1f} s wall)",
                flush=True,
            )
            runs.append(run)
    print()
    header = (
        f"{'case':<14}{'runner':<13}{'env steps':>11}{'updates':>10}{'seconds':>9}"
        f"{'steps/s':>10}{'updates/s':>11}{'steps/s ratio':>15}{'upd/s ratio':>13}"
    )
    print(header)
    print("-" * len(header))
    for case in cases:
        baseline = next(r for r in runs if r.case == case)
        for run in (r for r in runs if r.case == case):
            upd_ratio = (
                run.updates_per_s / baseline.updates_per_s if baseline.updates else float("nan")
            )
            print(
                f"{case:<14}{run.runner:<13}{run.steps:>11,}{run.updates:>10,}{run.seconds:>9.1f}"
                f"{run.steps_per_s:>10,.0f}{run.updates_per_s:>11,.1f}"
                f"{run.steps_per_s / baseline.steps_per_s:>15.2f}{upd_ratio:>13.2f}"
            )
    print("ratios: each runner / the case's first (MinibatchRl), from the same run of this script")
    print_load("after")


if __name__ == "__main__":
    main()
