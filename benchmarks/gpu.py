"""Every GPU comparison this project claims, side by side with its peer, in one run.

    python benchmarks/gpu.py                  # a CUDA GPU: at most 8 minutes (--deadline)
    python benchmarks/gpu.py --only sac td3   # some rows only
    python benchmarks/gpu.py --only speedrun --deadline 590   # the Pong speedrun alone
    python benchmarks/gpu.py --full --deadline 1500           # every row, the speedrun too
    python benchmarks/gpu.py --quick          # the CPU, tiny sizes: checks that it still works

``--deadline`` (480 s by default: the 8 minutes the GPU issue gives the script) bounds the
whole run: no row starts after it, and a run (one side of a row) is killed at it, or after
200 s; a row not started is listed as skipped, and the table always prints. The rows run
in the order below. On a lent machine (15 minutes of device time
in all, a minute or two of it to start, 600 s a call): one call of the plain command with
``timeout_s`` 600; then, while the machine is still warm and time is left, ``--only`` the
rows listed as skipped. The speedrun (up to ``--speedrun-minutes``, 8) needs a call of its
own, and so a lease of its own.

Rows (each a function in ``ROWS``, named as ``--only`` takes them; each row prints as it
completes, as "work | rl-suite | peer | ratio (its target: met / NOT met) | also"):

- ``cuda tests`` (first: the quickest sign that compiling and capturing work there): the
  tests marked ``cuda`` (``pytest -m cuda`` over the test files of every package and of the
  integration tests that mark one): how many passed, failed and were skipped, and the
  failures' names.
- ``vec_env``: PPO on thousands of batched ``TorchCartPole``s, rl-suite against rsl_rl
  (``benchmarks/vec_env.py``'s runs, same settings on both sides), at 4,096, 16,384 and
  65,536 environments: env steps/s (target: at least 1.2x), the mean return of the last 100
  training episodes and the learning rate at the end (both adapt it to the KL); at 16,384
  also ours with ``compile=True`` against the same rsl_rl run.
- ``sac``, ``td3``: SAC and TD3 on Pendulum-v1 with the ``pendulum-sac`` / ``pendulum-td3``
  presets (one environment, one update of 256 / 100 per env step; ``learning.py``'s
  settings, ``QPG``, on both sides), on the GPU: rl-suite eager, and ``compile=True``
  with ``replay_device="cuda"``, against SB3 ``SAC`` / ``TD3`` with
  ``device="cuda"``: env steps/s over 1,500 steps timed after the learning start and 200
  warm-up updates (compiling and capturing happen there); target compiled >= 3x SB3.
- ``dqn``: DQN on Pong, the ``atari-dqn`` preset (Nature CNN, frame buffer, replay ratio 8:
  one update of 32 per 4 env steps) on 16 envs x 2 steps with the ``gpu`` sampler and 8
  workers, eager and compiled, against SB3 ``DQN("CnnPolicy")`` on ``make_atari_env``
  (``SubprocVecEnv`` of 16) in ``VecFrameStack(4)`` with ``train_freq=2, gradient_steps=8``
  (the same replay ratio), ``device="cuda"``; ``learning_dqn.py``'s Pong settings on both
  sides, epsilon a constant 0.01, learning from 2,048 steps, a replay of 100k: env steps/s
  over 6,144 steps after 1,280 warm-up updates, and updates/s (the time inside the training
  calls: ours ``optimize_agent`` then ``torch.cuda.synchronize``, its storing of the
  iteration's 32 steps included; SB3's ``train``); target 3x SB3 on both, compiled.
- ``ppo``: PPO on Pong, env steps/s over timed iterations after 2 warm-up ones (compiling,
  capturing): the ``atari`` preset (8 envs x 128 steps, 4 epochs x 4 minibatches) with
  SB3's network (the Nature CNN) compiled on the GPU with the ``alternating`` sampler (6
  iterations, 6,144 steps), against SB3
  ``PPO("CnnPolicy")`` on a ``SubprocVecEnv`` of 8 (``make_atari_env``,
  ``VecFrameStack(4)``) with ``n_steps=128``, 4 epochs of minibatches of 256 and the
  ``atari`` preset's other values (2 rollouts, then 6 timed); and the ``atari-fast`` preset
  as it is (64 envs x 64 steps, alternating, compiled; 5 iterations, 20,480 steps), held
  to its own target, at least 15,000 steps/s (no ratio: SB3 ran another size).
- ``replay``: a prioritized batch of 64 at CartPole-v1's sizes and its new priorities
  (``replay_device.py``'s case), the storage on the GPU, with the sum tree on the GPU
  (``tree_on_device``, DQN's ``pri_tree_on_device``) against the tree on the host (the
  default): us per batch, the best of alternating rounds; no target, it decides which
  default to keep.
- ``speedrun`` (with ``--full``, or named in ``--only``): ``rl-suite train ppo --preset
  atari-fast`` as a user runs it, stopped (Ctrl-C) once the training episodes' mean game
  score (``GameScoreAverage`` of ``progress.csv``: the last 100 episodes) reaches 20, or
  after ``--speedrun-minutes`` (8 by default: one call on a lent machine runs 10 at most),
  in its own process group (a stop reaches its workers):
  the run's own clock (``CumTime (s)``) at that row; target under 10 minutes.

Ours is timed the same way in every row but ``vec_env`` and ``speedrun``: the preset's runner
built with ``rl_suite.build``, started, and driven iteration by iteration as ``MinibatchRl``
does (sample, then ``optimize_agent``), no logging; the window is timed with
``perf_counter`` between ``torch.cuda.synchronize`` calls. SB3: ``model.learn`` over the
learning start and the warm-up, then a second, timed ``learn(reset_num_timesteps=False)``.
Every run is its own fresh process (spawn), ours then the peer's (with ``--quick``, one
process per row). A run that fails shows FAILED in its cell, the other runs go on, and the
script exits with an error at the end. Our frames are 104x80 (``AtariEnv``), SB3's 84x84
(its ``AtariWrapper``): the same game, frame skip 4, no-ops at reset and clipped rewards,
SB3's fire at reset and life loss as episode end aside.

The peers come as in the ``benchmarks`` nox session (stable-baselines3, rsl-rl-lib, ale-py
through rl-samplers[atari]); a row whose peer is missing says so and shows ours alone. On a
machine without network (a lent GPU machine), carry them as wheels: ``pip wheel --no-deps``
of each ``packages/*``, and ``pip download --no-deps`` of what its image lacks: gymnasium,
farama-notifications, ale-py, stable-baselines3, rsl-rl-lib, tensordict (0.15 asks for
torch >= 2.11) with pyvers, and GitPython, gitdb, smmap (rsl_rl imports git). Rehearse on a
CPU first, with the lent machine's torch (2.11 today: PyPI's CUDA build runs on a CPU) and
the wheels installed as there (``--no-deps --target``), then ``--quick``: torch 2.11's
compiler refused a form of PPO's loss that 2.13's took, which only such a run shows here.

``--quick`` runs every row on the CPU with tiny sizes (one vec_env size), compiling with
``{"backend": "aot_eager"}`` (inductor needs a C++ compiler and a minute), SB3 on the CPU,
the replay on the CPU for ``replay_device``, the speedrun as a run of 64 steps on 4 envs,
and the ``cuda`` tests of one file (none run without a GPU): its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import functools
import importlib.util
import io
import math
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import learning
import learning_dqn

# Nothing heavy at module level: each spawned run re-imports this module, and must import only
# its own library (vec_env, torch and the peers are imported where they are used).

ROOT = Path(__file__).resolve().parent.parent
VEC_ENV_SIZES = (4096, 16384, 65536)
QUICK_SIZES = (64,)
COMPILED_VEC_ENV_SIZE = 16384  # where rsl_rl was furthest ahead (issue 19)
QUICK_COMPILE = {"backend": "aot_eager"}  # (no C++ compiler needed, seconds to compile)
QPG_TARGET = 3.0  # compiled SAC / TD3, ours / SB3 steps/s
DQN_TARGET = 3.0  # ours / SB3, env steps/s and updates/s
PPO_FAST_TARGET = 15_000  # atari-fast, env steps/s
SPEEDRUN_SCORE, SPEEDRUN_TARGET_MIN = 20.0, 10.0
NATURE_CNN = {
    "channels": [32, 64, 64],
    "kernel_sizes": [8, 4, 3],
    "strides": [4, 2, 1],
    "paddings": [0, 0, 0],
}
RUN_TIMEOUT_S = 200.0  # one run (one side of a row) at most
EXIT_S = 10.0  # for a run that sent its result to exit on its own
DEADLINE_S = 480.0  # the whole script by default (issue 19: "at most 8 minutes")
SPEEDRUN_STOP_S = 70.0  # left to the speedrun's shutdown before --deadline
SB3_PONG_ID = "PongNoFrameskip-v4"  # make_atari_env's wrappers skip frames themselves
ADAM_EPS = learning.ADAM_EPS  # torch's default, SB3's DQN's and SAC's (as learning.py)


@dataclasses.dataclass(frozen=True)
class Sizes:
    """Iterations of a run: before the learning start (replay algorithms, in env steps; None:
    the preset's), warm-up iterations after it, and timed ones."""

    warmup: int
    timed: int
    learning_starts: int | None = None


@dataclasses.dataclass(frozen=True)
class PongShape:
    envs: int
    workers: int
    T: int  # steps per environment per iteration (PPO: per rollout)


@dataclasses.dataclass(frozen=True)
class Plan:
    """Every size the rows use, for the GPU and for --quick."""

    device: str
    threads: int | None  # torch threads of the Atari runs (None: the preset's, torch's default)
    decorrelation: int | None  # Atari samplers' max_decorrelation_steps (None: the preset's)
    compile: Any  # algo_kwargs.compile for the compiled runs
    replay_device: str
    qpg: Sizes  # SAC and TD3: iterations of one env step
    dqn: Sizes
    dqn_shape: PongShape
    dqn_replay: int
    ppo: Sizes  # the atari preset, ours (SB3: rollouts of as many steps)
    ppo_shape: PongShape
    ppo_fast: Sizes
    ppo_fast_overrides: tuple[str, ...]  # to the atari-fast preset
    speedrun_overrides: tuple[str, ...]  # to `rl-suite train ppo --preset atari-fast`


GPU_PLAN = Plan(
    device="cuda",
    threads=None,
    decorrelation=None,
    compile=True,
    replay_device="cuda",
    qpg=Sizes(warmup=200, timed=1_500),
    # (the warm-up's 1,280 updates capture the target-copy variant too: one per 312 updates)
    dqn=Sizes(warmup=160, timed=192, learning_starts=2_048),
    dqn_shape=PongShape(envs=16, workers=8, T=2),
    dqn_replay=100_000,
    ppo=Sizes(warmup=2, timed=6),
    ppo_shape=PongShape(envs=8, workers=8, T=128),
    ppo_fast=Sizes(warmup=2, timed=5),
    ppo_fast_overrides=(),
    speedrun_overrides=(),
)
QUICK_PLAN = Plan(
    device="cpu",
    threads=1,  # (a small CPU shared with the workers: more threads only contend)
    decorrelation=0,
    compile=QUICK_COMPILE,
    replay_device="cpu",
    qpg=Sizes(warmup=4, timed=16, learning_starts=300),  # (a batch of 256 needs 256 steps)
    dqn=Sizes(warmup=1, timed=3, learning_starts=64),
    dqn_shape=PongShape(envs=2, workers=2, T=2),
    dqn_replay=1_024,
    ppo=Sizes(warmup=1, timed=1),
    ppo_shape=PongShape(envs=2, workers=2, T=8),
    ppo_fast=Sizes(warmup=1, timed=1),
    ppo_fast_overrides=(
        "device='cpu'",
        "torch_threads=1",
        "sampler.batch_B=4",
        "sampler.batch_T=8",
        "sampler.workers=2",
        f"algo_kwargs.compile={QUICK_COMPILE!r}",
    ),
    speedrun_overrides=(
        "--device=cpu",
        "--set=torch_threads=1",
        "--num-envs=4",
        "--workers=2",
        "--steps=64",
        "--set=sampler.batch_T=8",
        "--set=runner.log_interval_steps=32",
        f"--set=algo_kwargs.compile={QUICK_COMPILE!r}",
    ),
)


@dataclasses.dataclass(frozen=True)
class Speed:
    """A timed window of training."""

    steps: int  # env steps in the window
    seconds: float
    updates: int  # gradient steps in the window
    update_s: float  # of it, inside the training calls
    warmup_s: float  # from building the runner / model to the window (startup, compiling)

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.seconds

    @property
    def updates_per_s(self) -> float:
        return self.updates / self.update_s if self.update_s > 0 else math.nan


def missing(module: str) -> str | None:
    """``"<module> not installed"`` (a cell's text) when it is not; else None."""
    return None if importlib.util.find_spec(module) else f"{module} not installed"


def ratio_cell(ratio: float, target: float | None) -> str:
    """``2.41 (target 3x: NOT met)``; ``target=None``: no target for this row."""
    if target is None:
        return f"{ratio:.2f} (no target)"
    return f"{ratio:.2f} (target {target:g}x: {'met' if ratio >= target else 'NOT met'})"


def emit(rows: list[list[str]], row: list[str]) -> None:
    rows.append(row)
    print("  " + " | ".join(row), flush=True)


Call = tuple[Callable[..., Any], tuple[Any, ...]]


@dataclasses.dataclass(frozen=True)
class Failure:
    """A run that raised: its error, as a cell shows it."""

    error: str


def run_calls(calls: dict[str, Call]) -> dict[str, Any]:
    """Each call's result (a ``Failure`` for one that raises), one after another, here."""
    results: dict[str, Any] = {}
    for name, (func, func_args) in calls.items():
        try:
            results[name] = func(*func_args)
        except Exception as error:
            traceback.print_exc()
            results[name] = Failure(f"{type(error).__name__}: {error}")
    return results


def _send_result(conn: Any, func: Callable[..., Any], func_args: tuple[Any, ...]) -> None:
    conn.send(func(*func_args))


def in_fresh_process(func: Callable[..., Any], func_args: tuple[Any, ...], timeout: float) -> Any:
    """``func(*func_args)`` in a new interpreter (spawn); killed, with a TimeoutError, when
    it runs past ``timeout`` seconds (a hung run must not take the rest of the call)."""
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=_send_result, args=(sender, func, func_args))
    process.start()
    sender.close()
    try:
        if not receiver.poll(timeout):
            raise TimeoutError(f"still running after {timeout:.0f} s: killed")
        result = receiver.recv()  # (EOFError when the process died without a result)
        # Let it exit on its own: killed at once, it could not release its semaphores, which
        # the resource tracker then reported as leaked.
        process.join(EXIT_S)
        return result
    finally:
        if process.is_alive():
            process.kill()
        process.join()


def time_left(args: argparse.Namespace) -> float:
    """Seconds a run may take: ``RUN_TIMEOUT_S``, or less to end by ``--deadline``."""
    return max(1.0, min(RUN_TIMEOUT_S, args.deadline - (time.perf_counter() - args.start)))


def run_sides(calls: dict[str, Call], args: argparse.Namespace, row: str) -> dict[str, Any]:
    """Each call in a fresh process (spawn), one after another; with --quick all in one
    (the time is in starting them). A failed call gives a ``Failure`` (the others still
    run: one call on a lent machine) and is counted in ``args.failures`` as ``row: name``."""
    batches = [calls] if args.quick else [{name: call} for name, call in calls.items()]
    results: dict[str, Any] = {}
    for batch in batches:
        try:
            results.update(in_fresh_process(run_calls, (batch,), time_left(args)))
        except Exception as error:  # (the process died or timed out)
            traceback.print_exc()
            results.update({name: Failure(f"{type(error).__name__}: {error}") for name in batch})
    args.failures += [f"{row}: {name}" for name, r in results.items() if isinstance(r, Failure)]
    return results


def speed_text(run: Speed | Failure | str, updates: bool = False) -> str:
    if isinstance(run, Failure):
        return f"FAILED ({run.error[:60]})"
    if isinstance(run, str):  # (why there is no run: the peer is not installed)
        return run
    return f"{run.steps_per_s:,.0f} steps/s" + (f", {run.updates_per_s:,.0f} upd/s" * updates)


def compare(
    ours: Speed | Failure, peer: Speed | Failure | str, target: float | None, updates: bool = False
) -> list[str]:
    """A row's cells after the work: ours, the peer's, the ratio (of env steps/s; with
    ``updates``, of updates/s too, both held to ``target``) and the warm-up times."""
    cells = [speed_text(ours, updates), speed_text(peer, updates)]
    warmups = [f"{run.warmup_s:.0f} s" for run in (ours, peer) if isinstance(run, Speed)]
    also = f"warm-up {' / '.join(warmups)}" if warmups else ""
    if not (isinstance(ours, Speed) and isinstance(peer, Speed)):
        return [*cells, "-", also]
    ratio = ours.steps_per_s / peer.steps_per_s
    if not updates:
        return [*cells, ratio_cell(ratio, target), also]
    update_ratio = ours.updates_per_s / peer.updates_per_s
    if target is None:
        text = f"{ratio:.2f}, upd {update_ratio:.2f} (no target)"
    else:
        met = "met" if min(ratio, update_ratio) >= target else "NOT met"
        text = f"{ratio:.2f}, upd {update_ratio:.2f} (target {target:g}x: {met})"
    return [*cells, text, f"updates {ours.updates:,} / {peer.updates:,}; {also}"]


# ---------------------------------------------------------------------------------- vec_env


def vec_env_rows(args: argparse.Namespace) -> list[list[str]]:
    """rl-suite and rsl_rl at each size: one row per size, and one more for ours compiled
    at ``COMPILED_VEC_ENV_SIZE`` (against the same rsl_rl run)."""
    import vec_env

    rows: list[list[str]] = []
    peer = missing("rsl_rl") or "rsl_rl"  # (its run's name, or why there is none)
    compiled_size = QUICK_SIZES[0] if args.quick else COMPILED_VEC_ENV_SIZE
    for envs in QUICK_SIZES if args.quick else VEC_ENV_SIZES:
        settings = vec_env.Settings(
            envs=envs,
            iterations=1 if args.quick else args.iterations,
            warmup=1 if args.quick else 2,
            threads=1,  # (as vec_env.py by default: one torch thread per run)
            device=args.device,
            hidden=vec_env.HIDDEN,
        )
        calls: dict[str, Call] = {"ours": (vec_env.run_ours, (settings, 0))}
        if peer == "rsl_rl":
            calls[peer] = (vec_env.run_rsl_rl, (settings, 0))
        if envs == compiled_size:
            compiled = dataclasses.replace(settings, compile=True)
            calls["ours compiled"] = (vec_env.run_ours, (compiled, 0))
        runs = run_sides(calls, args, f"vec_env {envs:,}")
        for name in ("ours", "ours compiled"):
            if name in runs:
                label = ", ours compiled" if name == "ours compiled" else ""
                emit(
                    rows,
                    vec_env_row(
                        f"vec_env PPO, {envs:,} envs{label}", runs[name], runs.get(peer, peer)
                    ),
                )
    return rows


def vec_env_row(work: str, ours: Any, peer: Any) -> list[str]:
    """Steps/s of each side (``vec_env.Run``s, or why there is none), the ratio against
    vec_env.py's target, the returns and final learning rates."""
    import vec_env

    def cell(run: Any) -> str:
        return (
            speed_text(run) if isinstance(run, Failure | str) else f"{run.steps_per_s:,.0f} steps/s"
        )

    if isinstance(ours, Failure) or isinstance(peer, Failure | str):
        return [work, cell(ours), cell(peer), "-", ""]
    return [
        work,
        cell(ours),
        cell(peer),
        ratio_cell(ours.steps_per_s / peer.steps_per_s, vec_env.SPEED_TARGET),
        f"return {ours.mean_return:.0f} / {peer.mean_return:.0f}, "
        f"lr {ours.learning_rate:.1e} / {peer.learning_rate:.1e}",
    ]


# ---------------------------------------------------------------------------------- rl-suite


def our_window(config: dict[str, Any], sizes: Sizes) -> Speed:
    """Build and start ``config``'s runner, run its iterations up to the learning start and
    ``sizes.warmup`` more, then time ``sizes.timed`` iterations (sampling, then
    ``optimize_agent``, as ``MinibatchRl`` runs them; nothing logged)."""
    begin = time.perf_counter()
    import torch

    import rl_suite
    from rl_runners import logger_context

    sync = torch.cuda.synchronize if config["device"] != "cpu" else lambda: None
    runner = rl_suite.build(config)
    with (
        tempfile.TemporaryDirectory(prefix="gpu-bench-") as log_dir,
        open(os.devnull, "w") as devnull,
        contextlib.redirect_stdout(devnull),
        logger_context(log_dir, 0, "gpu", log_params={}, snapshot_mode="none"),
    ):
        runner.startup()
        try:
            algo, sampler, modes = runner.algo, runner.sampler, runner.modes
            first = runner.min_itr_learn + sizes.warmup  # iterations before the window
            if first + sizes.timed > runner.n_itr:
                raise ValueError(f"{config['steps']=} is too few for {first + sizes.timed} itrs")

            def iteration(itr: int) -> float:
                """One iteration; returns its seconds in optimize_agent (synchronized)."""
                modes.switch("sample", itr)
                samples, _ = sampler.obtain_samples(itr)
                modes.switch("train", itr)
                start = time.perf_counter()
                algo.optimize_agent(itr, samples)
                sync()
                return time.perf_counter() - start

            for itr in range(first):
                iteration(itr)
            sync()
            warmup_s, updates = time.perf_counter() - begin, algo.update_counter
            start = time.perf_counter()
            update_s = sum(iteration(itr) for itr in range(first, first + sizes.timed))
            sync()
            seconds = time.perf_counter() - start
        finally:
            runner.shutdown()
    return Speed(
        steps=sizes.timed * runner.itr_batch_size,
        seconds=seconds,
        updates=algo.update_counter - updates,
        update_s=update_s,
        warmup_s=warmup_s,
    )


def qpg_config(task: str, plan: Plan, compiled: bool) -> dict[str, Any]:
    """The ``pendulum-<task>`` preset on ``plan.device``, eager or ``compiled`` with the
    replay on the device too."""
    import rl_suite

    config = rl_suite.make_config(QPG_PRESETS[task], device=plan.device, seed=0)
    overrides = ["runner.evaluate=False", "runner.snapshot_mode='none'"]
    if plan.qpg.learning_starts is not None:
        overrides.append(f"algo_kwargs.min_steps_learn={plan.qpg.learning_starts}")
    if compiled:
        overrides.append(f"algo_kwargs.compile={plan.compile!r}")
        overrides.append(f"algo_kwargs.replay_device={plan.replay_device!r}")
    return rl_suite.apply_overrides(config, overrides)


def atari_overrides(plan: Plan) -> list[str]:
    """The plan's torch threads and decorrelation steps, where it sets them."""
    overrides = []
    if plan.threads is not None:
        overrides.append(f"torch_threads={plan.threads}")
    if plan.decorrelation is not None:
        overrides.append(f"sampler.max_decorrelation_steps={plan.decorrelation}")
    return overrides


def dqn_config(plan: Plan, compiled: bool) -> dict[str, Any]:
    """The ``atari-dqn`` preset on Pong, ``gpu`` sampler, with ``learning_dqn.py``'s Pong
    settings and a constant epsilon."""
    import rl_suite

    shape, sizes = plan.dqn_shape, plan.dqn
    config = rl_suite.make_config("atari-dqn", env=learning_dqn.PONG_ENV, device=plan.device)
    overrides = [
        "sampler.kind='gpu'",
        f"sampler.workers={shape.workers}",
        f"sampler.batch_B={shape.envs}",
        f"sampler.batch_T={shape.T}",
        f"algo_kwargs.replay_size={plan.dqn_replay}",
        f"algo_kwargs.min_steps_learn={sizes.learning_starts}",
        f"algo_kwargs.optim_kwargs={{'eps': {ADAM_EPS!r}, 'fused': True}}",
        f"agent.model_kwargs={{'paddings': {learning_dqn.NATURE_PADDINGS}}}",
        f"agent_kwargs.eps_init={learning_dqn.PONG['exploration_final_eps']}",
        "runner.evaluate=False",
        "runner.snapshot_mode='none'",
    ]
    overrides += atari_overrides(plan)
    if compiled:
        overrides.append(f"algo_kwargs.compile={plan.compile!r}")
    return rl_suite.apply_overrides(config, overrides)


def ppo_config(plan: Plan, preset: str) -> dict[str, Any]:
    """``atari`` with the ``alternating`` sampler (a GPU run's default), compiled, or
    ``atari-fast`` as it is (sized down with --quick); on Pong, without evaluation."""
    import rl_suite

    config = rl_suite.make_config(preset, env=learning_dqn.PONG_ENV)
    if preset == "atari-fast":
        return rl_suite.apply_overrides(config, list(plan.ppo_fast_overrides))
    shape = plan.ppo_shape
    overrides = [
        f"device={plan.device!r}",
        "sampler.kind='alternating'",
        f"sampler.workers={shape.workers}",
        f"sampler.batch_B={shape.envs}",
        f"sampler.batch_T={shape.T}",
        f"algo_kwargs.compile={plan.compile!r}",
        "runner.evaluate=False",
        # SB3's CnnPolicy's network (the Nature CNN), so both sides do the same work
        *(f"agent.model_kwargs.{key}={value!r}" for key, value in NATURE_CNN.items()),
    ]
    overrides += atari_overrides(plan)
    return rl_suite.apply_overrides(config, overrides)


# ---------------------------------------------------------------------------------- SB3


def sb3_window(
    build: Callable[..., Any], build_args: tuple[Any, ...], warmup: int, timed: int
) -> Speed:
    """``build(*build_args)``'s SB3 model learning ``warmup`` env steps, then ``timed`` more
    timed (with the time inside its ``train`` calls)."""
    begin = time.perf_counter()
    import torch

    model = build(*build_args)
    update_s, train = [0.0], model.train

    def timed_train(*args: Any, **kwargs: Any) -> None:
        start = time.perf_counter()
        try:
            train(*args, **kwargs)
        finally:
            update_s[0] += time.perf_counter() - start

    try:
        model.learn(total_timesteps=warmup)
        if model.device.type == "cuda":
            torch.cuda.synchronize()
        warmup_s = time.perf_counter() - begin
        steps, updates = model.num_timesteps, model._n_updates
        model.train = timed_train  # type: ignore[method-assign]
        start = time.perf_counter()
        model.learn(total_timesteps=timed, reset_num_timesteps=False)
        if model.device.type == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
    finally:
        model.env.close()
    return Speed(
        steps=model.num_timesteps - steps,
        seconds=seconds,
        updates=model._n_updates - updates,
        update_s=update_s[0],
        warmup_s=warmup_s,
    )


def sb3_qpg(task: str, learning_starts: int, device: str) -> Any:
    """SB3's SAC or TD3 with ``learning.py``'s settings (``learning.QPG``), on ``device``."""
    learning.set_threads(1)  # (as our presets and learning.py)
    import numpy as np
    from stable_baselines3 import SAC, TD3
    from stable_baselines3.common.noise import NormalActionNoise
    from stable_baselines3.common.vec_env import DummyVecEnv

    want = learning.QPG[task]
    common: dict[str, Any] = dict(
        learning_rate=want["learning_rate"],
        buffer_size=want["buffer_size"],
        learning_starts=learning_starts,
        batch_size=want["batch_size"],
        tau=want["tau"],
        gamma=want["gamma"],
        train_freq=1,
        gradient_steps=1,
        policy_kwargs=dict(net_arch=want["net_arch"], optimizer_kwargs=dict(eps=ADAM_EPS)),
        seed=0,
        device=device,
        verbose=0,
    )
    env = DummyVecEnv([learning.make_pendulum])
    if task == "sac":
        return SAC("MlpPolicy", env, ent_coef="auto", target_update_interval=1, **common)
    noise = NormalActionNoise(mean=np.zeros(1), sigma=np.full(1, want["action_noise"]))
    return TD3(
        "MlpPolicy",
        env,
        action_noise=noise,
        policy_delay=want["policy_delay"],
        target_policy_noise=want["target_policy_noise"],
        target_noise_clip=want["target_noise_clip"],
        **common,
    )


def make_sb3_pong(**kwargs: Any) -> Any:
    """Pong without frame skipping, for SB3's ``AtariWrapper`` (in each env's process:
    ale-py registers its games when imported)."""
    import ale_py
    import gymnasium

    gymnasium.register_envs(ale_py)
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Warning)
    return gymnasium.make(SB3_PONG_ID, **kwargs)


def sb3_pong_envs(n_envs: int) -> Any:
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import SubprocVecEnv, VecFrameStack

    envs = make_atari_env(make_sb3_pong, n_envs=n_envs, seed=0, vec_env_cls=SubprocVecEnv)
    return VecFrameStack(envs, n_stack=learning_dqn.NUM_IMG_OBS)


def sb3_dqn(plan: Plan) -> Any:
    """SB3's DQN with ``learning_dqn.py``'s Pong settings, our replay ratio, on the device."""
    learning.set_threads(plan.threads or 0)
    from stable_baselines3 import DQN

    shape, pong = plan.dqn_shape, learning_dqn.PONG
    updates = pong["replay_ratio"] * shape.envs * shape.T // pong["batch_size"]
    steps_per_update = shape.envs * shape.T // updates
    return DQN(
        "CnnPolicy",
        sb3_pong_envs(shape.envs),
        learning_rate=pong["learning_rate"],
        buffer_size=plan.dqn_replay,
        learning_starts=plan.dqn.learning_starts,
        batch_size=pong["batch_size"],
        tau=1.0,
        gamma=pong["gamma"],
        train_freq=shape.T,  # calls of env.step: shape.envs env steps each
        gradient_steps=updates,
        target_update_interval=pong["target_update_updates"] * steps_per_update,
        exploration_initial_eps=pong["exploration_final_eps"],  # constant, as ours here
        exploration_final_eps=pong["exploration_final_eps"],
        max_grad_norm=pong["max_grad_norm"],
        optimize_memory_usage=False,
        policy_kwargs=dict(optimizer_kwargs=dict(eps=ADAM_EPS)),
        seed=0,
        device=plan.device,
        verbose=0,
    )


def sb3_ppo(plan: Plan, algo: dict[str, Any]) -> Any:
    """SB3's PPO with the ``atari`` preset's values, ``algo`` (ours' value loss is 0.5 x
    squared error x 1.0: SB3's vf_coef 0.5 on the squared error; its gradient norm clipped
    at 1, our PPO's default)."""
    learning.set_threads(plan.threads or 0)
    from stable_baselines3 import PPO

    shape = plan.ppo_shape
    return PPO(
        "CnnPolicy",
        sb3_pong_envs(shape.envs),
        learning_rate=algo["learning_rate"],
        n_steps=shape.T,
        batch_size=shape.envs * shape.T // algo["minibatches"],
        n_epochs=algo["epochs"],
        gamma=algo["discount"],
        gae_lambda=algo["gae_lambda"],
        clip_range=algo["ratio_clip"],
        ent_coef=algo["entropy_loss_coeff"],
        vf_coef=algo["value_loss_coeff"] / 2,
        max_grad_norm=1.0,
        seed=0,
        device=plan.device,
        verbose=0,
    )


# ---------------------------------------------------------------------------------- rows

QPG_PRESETS = {"sac": "pendulum-sac", "td3": "pendulum-td3"}
QPG_TARGETS = {"eager": None, "compiled": QPG_TARGET}


def qpg_rows(task: str, args: argparse.Namespace) -> list[list[str]]:
    """Ours eager, and compiled with the replay on the device, against SB3."""
    plan: Plan = args.plan
    sizes = plan.qpg
    starts = sizes.learning_starts or learning.QPG[task]["learning_starts"]
    calls: dict[str, Call] = {
        variant: (our_window, (qpg_config(task, plan, variant == "compiled"), sizes))
        for variant in QPG_TARGETS
    }
    peer = missing("stable_baselines3") or "SB3"  # (its run's name, or why there is none)
    if peer == "SB3":
        sb3_args = (task, starts, plan.device)
        calls[peer] = (sb3_window, (sb3_qpg, sb3_args, starts + sizes.warmup, sizes.timed))
    runs = run_sides(calls, args, task)
    rows: list[list[str]] = []
    for variant, target in QPG_TARGETS.items():
        where = f", replay on {plan.replay_device}" if variant == "compiled" else ""
        work = f"{task.upper()} Pendulum, {variant}{where}"
        emit(rows, [work, *compare(runs[variant], runs.get(peer, peer), target)])
    return rows


def sac_rows(args: argparse.Namespace) -> list[list[str]]:
    return qpg_rows("sac", args)


def td3_rows(args: argparse.Namespace) -> list[list[str]]:
    return qpg_rows("td3", args)


def dqn_rows(args: argparse.Namespace) -> list[list[str]]:
    """Ours eager and compiled against SB3: env steps/s and updates/s."""
    plan: Plan = args.plan
    if missing("ale_py"):
        return [["DQN Pong", "ale_py not installed", "", "-", ""]]
    shape, sizes = plan.dqn_shape, plan.dqn
    calls: dict[str, Call] = {
        name: (our_window, (dqn_config(plan, compiled), sizes))
        for name, compiled in (("eager", False), ("compiled", True))
    }
    peer = missing("stable_baselines3") or "SB3"
    if peer == "SB3":
        itr = shape.envs * shape.T  # (SB3 learns in whole collections of as many steps)
        warmup = -(-(sizes.learning_starts or 0) // itr) * itr + sizes.warmup * itr
        calls[peer] = (sb3_window, (sb3_dqn, (plan,), warmup, sizes.timed * itr))
    runs = run_sides(calls, args, "dqn")
    rows: list[list[str]] = []
    for name in ("eager", "compiled"):
        work = f"DQN Pong, {shape.envs} envs, {shape.workers} workers, {name}"
        target = DQN_TARGET if name == "compiled" else None
        emit(rows, [work, *compare(runs[name], runs.get(peer, peer), target, updates=True)])
    return rows


def ppo_rows(args: argparse.Namespace) -> list[list[str]]:
    """The atari preset compiled, and atari-fast, against SB3."""
    import rl_suite

    plan: Plan = args.plan
    if missing("ale_py"):
        return [["PPO Pong", "ale_py not installed", "", "-", ""]]
    shape = plan.ppo_shape
    atari = f"atari, Nature CNN, {shape.envs}x{shape.T}"
    configs = {
        f"{atari}, alternating, compiled": (ppo_config(plan, "atari"), plan.ppo),
        "atari-fast": (ppo_config(plan, "atari-fast"), plan.ppo_fast),
    }
    calls: dict[str, Call] = {name: (our_window, sized) for name, sized in configs.items()}
    peer = missing("stable_baselines3") or "SB3"  # (its run's name, or why there is none)
    if peer == "SB3":
        rollout = shape.envs * shape.T
        warmup, timed = plan.ppo.warmup * rollout, plan.ppo.timed * rollout
        algo_kwargs = rl_suite.make_config("atari")["algo_kwargs"]
        calls[peer] = (sb3_window, (sb3_ppo, (plan, algo_kwargs), warmup, timed))
    runs = run_sides(calls, args, "ppo")
    rows: list[list[str]] = []
    for name, (config, _) in configs.items():
        ours, peer_run = runs[name], runs.get(peer, peer)
        cells = compare(ours, peer_run, None)
        sampler = config["sampler"]
        cells[3] = f"{sampler['batch_B']} envs x {sampler['batch_T']}; {cells[3]}"
        if name == "atari-fast":  # (its target is a speed; SB3 ran the atari preset's size)
            cells[1] = "-"
            met = isinstance(ours, Speed) and ours.steps_per_s >= PPO_FAST_TARGET
            cells[2] = f"target {PPO_FAST_TARGET:,} steps/s: {'met' if met else 'NOT met'}"
        emit(rows, [f"PPO Pong, {name}", *cells])
    return rows


def replay_tree_times(quick: bool) -> dict[str, float]:
    """Seconds per prioritized batch and update with the storage on the GPU (the CPU with
    ``quick``): the tree on the host, and on the device, timed in alternating rounds."""
    import replay_device

    sizes = replay_device.QUICK if quick else replay_device.SIZES
    device = "cpu" if quick else "cuda"
    cases = replay_device.replay_cases(device)
    sides = {
        "host tree": cases["prioritized, 1 batch of 64 (CartPole)"],
        "device tree": cases["prioritized, the tree on the device too"],
    }
    buffers = {side: make(sizes["steps"], device) for side, (make, _) in sides.items()}
    best = dict.fromkeys(sides, math.inf)
    for _ in range(sizes["rounds"]):
        for side, (_, case) in sides.items():
            call = functools.partial(case, buffers[side])
            best[side] = min(best[side], replay_device.best_time(call, sizes["min_time"]))
    return best


def replay_rows(args: argparse.Namespace) -> list[list[str]]:
    times = run_sides({"replay": (replay_tree_times, (args.quick,))}, args, "replay")["replay"]
    work = "prioritized replay on the GPU, batch of 64 + update"
    rows: list[list[str]] = []
    if isinstance(times, Failure):
        emit(rows, [work, speed_text(times), "", "-", ""])
        return rows
    host, device = times["host tree"], times["device tree"]
    cells = [f"{device * 1e6:.0f} us, tree on the GPU", f"{host * 1e6:.0f} us, tree on the host"]
    emit(rows, [work, *cells, ratio_cell(host / device, None), "above 1: the GPU tree wins"])
    return rows


def cuda_test_files() -> list[str]:
    """The test files of every package and of the integration tests that mark a test
    ``cuda`` (collecting only them saves the time of importing the others)."""
    folders = [*sorted((ROOT / "packages").glob("*/tests")), ROOT / "integration_tests"]
    return [
        str(path.relative_to(ROOT))
        for folder in folders
        for path in sorted(folder.rglob("test_*.py"))
        if "mark.cuda" in path.read_text(encoding="utf-8")
    ]


def cuda_test_rows(args: argparse.Namespace) -> list[list[str]]:
    """The ``cuda``-marked tests (with --quick, one file's: skipped without a GPU)."""
    paths = ["packages/rl-samplers/tests/test_batched.py"] if args.quick else cuda_test_files()
    with tempfile.TemporaryDirectory(prefix="gpu-tests-") as tmp:
        report = Path(tmp) / "report.xml"
        command = [sys.executable, "-m", "pytest", "-m", "cuda", "-q", "-p", "no:cacheprovider"]
        run = subprocess.run(
            [*command, f"--junitxml={report}", *paths],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            timeout=time_left(args),
        )
        if not report.is_file():  # (pytest missing, or it could not start)
            raise RuntimeError(f"pytest ran no tests (exit code {run.returncode}): {run.stderr}")
        cases = ET.parse(report).getroot().iter("testcase")
        outcomes: dict[str, list[str]] = {"passed": [], "failed": [], "skipped": []}
        for case in cases:
            kind = next(
                (
                    {"failure": "failed", "error": "failed", "skipped": "skipped"}[child.tag]
                    for child in case
                    if child.tag in ("failure", "error", "skipped")
                ),
                "passed",
            )
            outcomes[kind].append(f"{case.get('classname')}::{case.get('name')}")
    counts = ", ".join(f"{len(names)} {kind}" for kind, names in outcomes.items())
    failed = "; ".join(outcomes["failed"]) or "-"
    rows: list[list[str]] = []
    emit(rows, ["cuda tests (pytest -m cuda)", counts, "", "", f"failed: {failed}"])
    return rows


def first_score_row(progress: Path) -> tuple[dict[str, str] | None, dict[str, str] | None]:
    """(the first row of ``progress.csv`` whose mean game score reaches the bar, the last
    row), each None when there is none."""
    if not progress.is_file():
        return None, None
    text = progress.read_text(encoding="utf-8")
    # (a last line still being written is left out)
    rows = list(csv.DictReader(io.StringIO(text[: text.rfind("\n") + 1], newline="")))
    for row in rows:
        score = float(row.get("GameScoreAverage") or "nan")
        if score >= SPEEDRUN_SCORE:
            return row, rows[-1]
    return None, rows[-1] if rows else None


def speedrun_rows(args: argparse.Namespace) -> list[list[str]]:
    """``rl-suite train ppo --preset atari-fast``, stopped at a mean game score of 20 or
    after ``--speedrun-minutes``."""
    if missing("ale_py"):
        return [["PPO Pong speedrun", "ale_py not installed", "", "-", ""]]
    cap_s = 60.0 if args.quick else args.speedrun_minutes * 60
    cap_s = min(cap_s, args.deadline - (time.perf_counter() - args.start) - SPEEDRUN_STOP_S)
    if cap_s <= 0:
        raise TimeoutError("no time left before --deadline")
    command = [sys.executable, "-m", "rl_suite", "train", "ppo", "--preset", "atari-fast"]
    with tempfile.TemporaryDirectory(prefix="gpu-speedrun-") as log_dir:
        progress = Path(log_dir) / "run_0" / "progress.csv"
        console = Path(log_dir) / "console.txt"
        command += ["--seed=0", f"--log-dir={log_dir}", *args.plan.speedrun_overrides]
        start, reached, last = time.perf_counter(), None, None
        with open(console, "w") as out:
            # Its own process group: a stop reaches its sampler workers too, and a Ctrl-C
            # here reaches it only through the finally below.
            run = subprocess.Popen(
                command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
            try:
                while run.poll() is None and time.perf_counter() - start < cap_s:
                    time.sleep(1.0 if args.quick else 5.0)
                    reached, last = first_score_row(progress)
                    if reached is not None:
                        break
            finally:
                if run.poll() is None:  # Ctrl-C: the run shuts its workers down
                    os.killpg(run.pid, signal.SIGINT)
                    try:
                        run.wait(timeout=SPEEDRUN_STOP_S - 10)
                    except subprocess.TimeoutExpired:
                        os.killpg(run.pid, signal.SIGKILL)
                        run.wait()
        wall_min = (time.perf_counter() - start) / 60
        reached, last = first_score_row(progress)
        if last is None:
            tail = console.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"the speedrun logged no row (exit {run.returncode}):\n{tail}")
    steps = f"{int((reached or last)['CumSteps']):,} steps"
    if reached is None:
        score = float(last.get("GameScoreAverage") or "nan")
        minutes = float(last["CumTime (s)"]) / 60
        cells = [f"not reached in {minutes:.1f} min", f"score {score:.1f} after {steps}"]
        verdict = "NOT met"
    else:
        minutes = float(reached["CumTime (s)"]) / 60
        cells = [f"{minutes:.1f} min", f"score {float(reached['GameScoreAverage']):.1f} at {steps}"]
        verdict = "met" if minutes < SPEEDRUN_TARGET_MIN else "NOT met"
    rows: list[list[str]] = []
    emit(
        rows,
        [
            f"PPO Pong speedrun (atari-fast) to {SPEEDRUN_SCORE:g}",
            cells[0],
            "",
            f"target < {SPEEDRUN_TARGET_MIN:g} min: {verdict}",
            f"{cells[1]}; {wall_min:.1f} min wall, launch to stop",
        ],
    )
    return rows


# The cuda tests first: the quickest sign that compiling and capturing work on the GPU.
ROWS: dict[str, Callable[[argparse.Namespace], list[list[str]]]] = {
    "cuda tests": cuda_test_rows,
    "vec_env": vec_env_rows,
    "sac": sac_rows,
    "td3": td3_rows,
    "dqn": dqn_rows,
    "ppo": ppo_rows,
    "replay": replay_rows,
    "speedrun": speedrun_rows,
}
FULL_ONLY = {"speedrun"}  # run with --full or --quick, or when --only names it


def print_table(rows: list[list[str]], device: str) -> None:
    import torch

    header = ["work", "rl-suite", "peer", "ratio (target: met / NOT met)", "also"]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    print(f"\nGPU claims on {device}, torch {torch.__version__}:")
    for row in [header, ["-" * w for w in widths], *rows]:
        print("| " + " | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="the CPU, tiny sizes (a minute or two)"
    )
    parser.add_argument("--full", action="store_true", help="also the Pong speedrun (minutes)")
    parser.add_argument(
        "--iterations", type=int, default=20, help="vec_env's timed iterations (20)"
    )
    parser.add_argument(
        "--speedrun-minutes", type=float, default=8.0, help="the speedrun's time cap (8)"
    )
    parser.add_argument("--only", choices=sorted(ROWS), nargs="+", help="these rows only")
    parser.add_argument(
        "--deadline",
        type=float,
        default=DEADLINE_S,
        help=f"seconds ({DEADLINE_S:.0f}): no row starts after it and runs are cut to end by "
        "it, so the table prints within a lent machine's call",
    )
    args = parser.parse_args()
    if args.iterations < 1 or args.speedrun_minutes <= 0:
        parser.error("--iterations must be at least 1 and --speedrun-minutes above 0")
    if args.deadline <= 0:
        parser.error("--deadline must be above 0 seconds")
    import torch

    if args.quick:
        args.device = "cpu"
    elif torch.cuda.is_available():
        args.device = "cuda"
    else:
        parser.error("no CUDA GPU here: run with --quick (the CPU) to check the script")
    args.plan = QUICK_PLAN if args.quick else GPU_PLAN
    device = torch.cuda.get_device_name() if args.device == "cuda" else "the CPU"
    print(f"benchmarks/gpu.py on {device}; load average {os.getloadavg()[0]:.2f}", flush=True)
    args.start, rows, args.failures = time.perf_counter(), [], []
    start = args.start
    for name, make_rows in ROWS.items():
        wanted = name not in FULL_ONLY or args.full or args.quick
        if args.only is not None:
            wanted = name in args.only
        if not wanted:
            continue
        if time.perf_counter() - start >= args.deadline:
            rows.append([name, "skipped: past --deadline", "", "", ""])
            args.failures.append(f"{name}: skipped")
            continue
        print(f"{name} ...", flush=True)
        row_start = time.perf_counter()
        try:
            rows += make_rows(args)
        except Exception as error:  # (the other rows still run: one call on a lent machine)
            traceback.print_exc()
            args.failures.append(name)
            rows.append([name, f"FAILED: {type(error).__name__}", "", "", str(error)[:200]])
        print(f"  ({time.perf_counter() - row_start:.0f} s)", flush=True)
    print_table(rows, device)
    print(f"({time.perf_counter() - start:.0f} s)")
    if args.failures:
        sys.exit(f"failed: {', '.join(args.failures)}")


if __name__ == "__main__":
    main()
