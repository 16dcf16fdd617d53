"""Sampler throughput on Pong: our samplers against one environment alone, gymnasium and
ale-py's own vector env.

    python benchmarks/samplers.py           # full run: about four minutes, on an otherwise idle machine
    python benchmarks/samplers.py --quick   # seconds; checks it still works, the numbers mean nothing

Environment steps per second (one step = one agent action = 4 emulator frames) of Pong, with an
agent that picks uniformly random actions (``RandomAgent`` below, one ``torch.randint`` per step
for all the environments it acts for), measured in one run:

1. one ``rl_samplers.AtariEnv`` (frame skip 4, 4 stacked 104x80 grayscale frames) stepped in a
   loop by a single process with random actions and no sampler: the per-core limit; and the
   same in 2 processes at once, pinned to cores 0 and 1 (whether the 2 cores do twice as much);
2. ``SerialSampler``: B=8 such environments in this process, batches of T x B steps;
3. ``CpuSampler``: the same B=8 environments in 2 worker processes pinned to cores 0 and 1, each
   worker with its own copy of the agent;
4. ``GpuSampler``: the same, but the workers only step environments and the main process (the
   action server, here with the agent on the CPU) picks the actions of all 8 every step;
5. gymnasium's ``AsyncVectorEnv`` (8 environments, one process each) of ``ALE/Pong-v5`` with
   ``frameskip=1`` and no sticky actions, wrapped in ``AtariPreprocessing(frame_skip=4,
   screen_size=(80, 104), grayscale_obs=True, noop_max=0)`` and ``FrameStackObservation(4)``,
   stepped with ``envs.action_space.sample()``: 8 steps per call. Its observations have our
   shape, [4, 104, 80] uint8 (gymnasium resizes the whole 210x160 screen with ``INTER_AREA``;
   ours crops two rows and halves both sides, an exact 2x); its environments also render each
   frame in RGB unless made with ``obs_type="grayscale"`` (the ``grayscale`` row: a setting
   ``AtariPreprocessing`` works with, which spares that; the faster of the two is the reference);
6. ale-py's own ``AtariVectorEnv`` (C++ threads, no Python per environment), B=8 Pong games
   with our preprocessing (frame skip 4, 4 stacked 104x80 grayscale frames, 30 start no-ops;
   it resizes the whole screen where we crop and halve), ``num_threads`` = the 2 workers'
   count, same-step autoreset, stepped alone with random actions: 8 steps per call;
7. ``BatchedSampler`` over ``rl_samplers.AleVectorEnv`` (that vector env as a ``BatchEnv``,
   ``num_threads=2``), B=8, batches of T x B steps: what the sampler adds on top of 6. Its
   process runs torch on 1 thread: with torch's default 2 here, torch's OpenMP threads and
   ALE's compete for the 2 cores, and batches were at times 3-4x slower.

``--quick`` uses B=2 and T=8.

The ratios the issue sets as targets are printed next to them: CpuSampler >= 0.85 x twice the
per-core limit (2 workers on 2 cores), >= 1.8 x AsyncVectorEnv; SerialSampler >= 0.9 x the
per-core limit. GpuSampler's ratios, those to the 2 processes at once and those of the
ale-py vector env (6, 7) have no target.

Each case runs in its own fresh process (started, like the samplers' workers from there, with
the default start method: fork on Linux), is warmed up (environments made and reset, the first
batches collected: no decorrelation steps), then timed as ``repeats`` groups of whole batches,
each group lasting about ``min_time`` (time.perf_counter around ``obtain_samples`` calls; T x B
steps each). The cases run one after another in ``rounds`` rounds, so that a slow spell of the
machine (on a shared 2-core host a whole process can run 40% slower than the next one) falls on
every case rather than on one. Reported: the best group over all rounds (ratios use it: another
process on this machine only ever slows a group down) and the median one. Every sampler is shut down (``with sampler:``) before its process ends. The load average
printed before and after says whether the machine was quiet: compare only quiet runs.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from rl_arrays import AgentStep
from rl_samplers import (
    AleVectorEnv,
    AtariEnv,
    BatchedSampler,
    CpuSampler,
    GpuSampler,
    SerialSampler,
)

GAME = "pong"
FRAME_SKIP = 4
NUM_IMG_OBS = 4
OBS_SIZE = (104, 80)  # (height, width), AtariEnv's default
ENV_KWARGS = dict(game=GAME, frame_skip=FRAME_SKIP, num_img_obs=NUM_IMG_OBS, obs_size=OBS_SIZE)
WORKERS_CPUS = [0, 1]  # the parallel samplers' workers, one per core
SEED = 0

# The targets: (numerator, denominator, at least).
TARGETS = {
    ("cpu", "2x limit"): 0.85,
    ("cpu", "gymnasium"): 1.8,
    ("serial", "limit"): 0.9,
}


@dataclass(frozen=True)
class Sizes:
    B: int  # environments of a sampler or of the vector env
    batch_T: int  # steps per environment per batch
    warmup_batches: int  # collected (or, alone: T x B single steps taken) before any timing
    repeats: int  # timed groups
    min_time: float  # seconds a timed group lasts, about (whole batches)
    rounds: int  # times every case is run, one after another, each time in a fresh process


FULL = Sizes(B=8, batch_T=64, warmup_batches=3, repeats=3, min_time=1.0, rounds=3)
QUICK = Sizes(B=2, batch_T=8, warmup_batches=1, repeats=1, min_time=0.0, rounds=1)


# ---------------------------------------------------------------------------------- the agent


class RandomAgent:
    """Uniformly random actions; implements rl_samplers' ``SamplerAgent`` protocol.

    Defined at module top level so that workers started by any method can import it. It uses
    torch's global generator, which each parallel-sampler worker seeds differently.
    """

    def initialize(
        self, env_spaces: Any, share_memory: bool = False, global_B: int = 1, env_ranks: Any = None
    ) -> None:
        self.n_actions = env_spaces.action.n

    def step(self, observation: Any, prev_action: Any, prev_reward: Any) -> AgentStep:
        # Leading dims [B], or [] for the one unbatched step that makes the samples' examples.
        action = torch.randint(self.n_actions, prev_reward.shape, dtype=torch.int64)
        return AgentStep(action=action, agent_info=None)

    def value(self, observation: Any, prev_action: Any, prev_reward: Any) -> torch.Tensor:
        return torch.zeros(prev_reward.shape)

    def reset(self) -> None:
        pass

    def reset_one(self, idx: int) -> None:
        pass

    def sample_mode(self, itr: int) -> None:
        pass

    def eval_mode(self, itr: int) -> None:
        pass

    def sync_shared_memory(self) -> None:
        pass


# ---------------------------------------------------------------------------------- timing


@dataclass
class Result:
    rates: list[float]  # env steps/s of each timed group

    @property
    def best(self) -> float:
        return max(self.rates)

    @property
    def median(self) -> float:
        return statistics.median(self.rates)


def timed_groups(
    call: Callable[[], int], sizes: Sizes, before_group: Callable[[], object] | None = None
) -> Result:
    """Warm up with ``warmup_batches`` calls, then time ``repeats`` groups of as many calls as
    last about ``min_time`` (at the fastest warm-up call's pace) each; ``call`` does one batch
    and returns how many env steps it took. ``before_group`` runs before each group, untimed."""
    per_call = float("inf")
    for _ in range(sizes.warmup_batches):
        start = time.perf_counter()
        call()
        per_call = min(per_call, time.perf_counter() - start)
    n = max(1, int(np.ceil(sizes.min_time / per_call))) if sizes.min_time > 0 else 1
    rates = []
    for _ in range(sizes.repeats):
        if before_group is not None:
            before_group()
        steps, start = 0, time.perf_counter()
        for _ in range(n):
            steps += call()
        rates.append(steps / (time.perf_counter() - start))
    return Result(rates)


# ---------------------------------------------------------------------------------- the cases


def measure_alone(sizes: Sizes, cpu: int | None = None, barrier: Any = None) -> Result:
    """One AtariEnv, random actions, no sampler, no agent: the per-core limit. ``cpu``: pin
    this process to it; ``barrier``: wait there before each timed group (see
    ``measure_alone_per_core``)."""
    if cpu is not None and hasattr(os, "sched_setaffinity"):  # (Linux)
        os.sched_setaffinity(0, [cpu])
    env = AtariEnv(**ENV_KWARGS, seed=SEED if cpu is None else SEED + cpu)
    rng = np.random.default_rng(SEED if cpu is None else SEED + cpu)
    n_actions = env.action_space.n
    env.reset()
    steps = sizes.batch_T * sizes.B  # as many steps per call as a sampler's batch

    def call() -> int:
        for action in rng.integers(n_actions, size=steps):
            if env.step(action).done:
                env.reset()
        return steps

    try:
        return timed_groups(call, sizes, None if barrier is None else barrier.wait)
    finally:
        env.close()


def _alone_to_queue(sizes: Sizes, cpu: int, barrier: Any, results: Any) -> None:
    results.put((cpu, measure_alone(sizes, cpu, barrier)))


def measure_alone_per_core(sizes: Sizes) -> Result:
    """``measure_alone`` in one process per core of WORKERS_CPUS at once (each pinned), their
    timed groups started together: what the cores can do with no sampler. A group's rate is
    the sum of the processes' rates in it."""
    context = multiprocessing.get_context()
    barrier = context.Barrier(len(WORKERS_CPUS))
    results = context.Queue()
    processes = [
        context.Process(target=_alone_to_queue, args=(sizes, cpu, barrier, results), daemon=True)
        for cpu in WORKERS_CPUS
    ]
    for process in processes:
        process.start()
    try:
        per_process = [results.get(timeout=600)[1] for _ in processes]
    finally:
        for process in processes:
            process.join(timeout=10)
            if process.is_alive():
                process.terminate()
    return Result([sum(rates) for rates in zip(*(r.rates for r in per_process), strict=True)])


def measure_sampler(kind: str, sizes: Sizes) -> Result:
    """One of our samplers with B environments and the random agent."""
    cls = {"serial": SerialSampler, "cpu": CpuSampler, "gpu": GpuSampler}[kind]
    affinity = None if kind == "serial" else {"workers_cpus": WORKERS_CPUS}
    sampler = cls(
        AtariEnv, ENV_KWARGS, batch_T=sizes.batch_T, batch_B=sizes.B, max_decorrelation_steps=0
    )
    with sampler:
        sampler.initialize(RandomAgent(), affinity=affinity, seed=SEED)
        itr = 0

        def call() -> int:
            nonlocal itr
            sampler.obtain_samples(itr)
            itr += 1
            return sizes.batch_T * sizes.B

        return timed_groups(call, sizes)


def measure_gymnasium(obs_type: str, sizes: Sizes) -> Result:
    """gymnasium's AsyncVectorEnv of B preprocessed Pong environments, random actions."""
    import ale_py
    import gymnasium as gym
    from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

    gym.register_envs(ale_py)
    height, width = OBS_SIZE

    def make_env() -> gym.Env:
        ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Warning)  # no banner, as ours
        env = gym.make("ALE/Pong-v5", frameskip=1, repeat_action_probability=0.0, obs_type=obs_type)
        env = AtariPreprocessing(
            env,
            frame_skip=FRAME_SKIP,
            screen_size=(width, height),  # gymnasium's order: (width, height)
            grayscale_obs=True,
            noop_max=0,
        )
        return FrameStackObservation(env, NUM_IMG_OBS)

    envs = gym.vector.AsyncVectorEnv([make_env] * sizes.B)
    try:
        envs.reset(seed=SEED)
        envs.action_space.seed(SEED)
        assert envs.observation_space.shape == (sizes.B, NUM_IMG_OBS, height, width)

        def call() -> int:
            for _ in range(sizes.batch_T):
                envs.step(envs.action_space.sample())
            return sizes.batch_T * sizes.B

        return timed_groups(call, sizes)
    finally:
        envs.close()


def measure_ale_vector(sizes: Sizes) -> Result:
    """ale-py's AtariVectorEnv of B Pong games with our preprocessing, random actions, no
    sampler: one thread per worker core."""
    from ale_py.vector_env import AtariVectorEnv
    from gymnasium.vector import AutoresetMode

    height, width = OBS_SIZE
    envs = AtariVectorEnv(
        GAME,
        sizes.B,
        num_threads=len(WORKERS_CPUS),
        autoreset_mode=AutoresetMode.SAME_STEP,
        img_height=height,
        img_width=width,
        stack_num=NUM_IMG_OBS,
        frameskip=FRAME_SKIP,
        use_fire_reset=False,
        reward_clipping=False,
        life_loss_info=True,
    )
    try:
        envs.reset(seed=SEED)
        assert envs.observation_space.shape == (sizes.B, NUM_IMG_OBS, height, width)
        rng = np.random.default_rng(SEED)
        n_actions = envs.single_action_space.n

        def call() -> int:
            for actions in rng.integers(n_actions, size=(sizes.batch_T, sizes.B)):
                envs.step(actions)
            return sizes.batch_T * sizes.B

        return timed_groups(call, sizes)
    finally:
        envs.close()


def _ale_vector_env(num_envs: int) -> AleVectorEnv:
    return AleVectorEnv(num_envs=num_envs, num_threads=len(WORKERS_CPUS), **ENV_KWARGS)


def measure_batched_ale(sizes: Sizes) -> Result:
    """BatchedSampler over AleVectorEnv (ale-py's vector env), B envs, the random agent;
    torch on 1 thread, ALE's threads on the cores (see the module's 7.)."""
    torch.set_num_threads(1)
    sampler = BatchedSampler(
        _ale_vector_env, batch_T=sizes.batch_T, batch_B=sizes.B, max_decorrelation_steps=0
    )
    with sampler:
        sampler.initialize(RandomAgent(), seed=SEED)
        itr = 0

        def call() -> int:
            nonlocal itr
            sampler.obtain_samples(itr)
            itr += 1
            return sizes.batch_T * sizes.B

        return timed_groups(call, sizes)


def in_fresh_process(func: Callable[..., Result], *args: object) -> Result:
    """Run func in a new child process, alone, started with the default method (fork on
    Linux: quick, the modules are already imported), as are the sampler's workers and the
    vector env's from there. This process never runs a torch operation, so no torch thread
    exists to break a fork."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context()) as pool:
        return pool.submit(func, *args).result()


# ---------------------------------------------------------------------------------- printing


def labels(B: int) -> dict[str, str]:
    return {
        "limit": "1 one AtariEnv, no sampler (per-core limit)",
        "per core": f"  the same in {len(WORKERS_CPUS)} processes at once, one per core",
        "serial": f"2 SerialSampler, B={B}",
        "cpu": f"3 CpuSampler, {len(WORKERS_CPUS)} workers, B={B}",
        "gpu": f"4 GpuSampler, {len(WORKERS_CPUS)} workers, agent on CPU, B={B}",
        "gym rgb": f"5 gymnasium AsyncVectorEnv, {B} envs",
        "gym grayscale": '  the same, obs_type="grayscale"',
        "ale": f"6 ale-py AtariVectorEnv, {len(WORKERS_CPUS)} threads, {B} envs",
        "batched": f"7 BatchedSampler, AleVectorEnv, {len(WORKERS_CPUS)} threads, B={B}",
    }


def print_rates(results: dict[str, Result], sizes: Sizes) -> None:
    print(
        f"\n(a) {GAME}: AtariEnv frame_skip={FRAME_SKIP}, {NUM_IMG_OBS} stacked "
        f"{OBS_SIZE[0]}x{OBS_SIZE[1]} frames, random actions; samplers T={sizes.batch_T}; "
        f"{sizes.rounds} x {sizes.repeats} timed group(s) of about {sizes.min_time:g} s"
    )
    header = f"{'case':<50}{'best, steps/s':>16}{'median, steps/s':>18}"
    print(header)
    print("-" * len(header))
    for key, result in results.items():
        print(f"{labels(sizes.B)[key]:<50}{result.best:>16,.0f}{result.median:>18,.0f}")


def print_ratios(results: dict[str, Result]) -> None:
    limit = results["limit"].best
    gym_key = max(("gym rgb", "gym grayscale"), key=lambda k: results[k].best)
    references = {
        "limit": ("per-core limit", limit),
        "2x limit": (f"{len(WORKERS_CPUS)} x per-core limit", len(WORKERS_CPUS) * limit),
        "per core": (
            f"{len(WORKERS_CPUS)} AtariEnvs at once, 1 per core",
            results["per core"].best,
        ),
        "gymnasium": (
            "AsyncVectorEnv" + (" (grayscale)" if gym_key == "gym grayscale" else ""),
            results[gym_key].best,
        ),
        "ale": ("ale-py AtariVectorEnv alone", results["ale"].best),
    }
    comparisons = [
        ("serial", "limit"),
        ("cpu", "2x limit"),
        ("cpu", "per core"),
        ("cpu", "gymnasium"),
        ("gpu", "2x limit"),
        ("gpu", "gymnasium"),
        ("ale", "limit"),
        ("ale", "2x limit"),
        ("ale", "per core"),
        ("batched", "2x limit"),
        ("batched", "ale"),
        ("cpu", "ale"),
    ]
    print("\n(b) ours (and ale-py's vector env) / reference, best groups (env steps/s)")
    header = (
        f"{'measured':<16}{'steps/s':>10}  {'reference':<34}{'steps/s':>10}{'ratio':>8}"
        f"{'target':>10}  "
    )
    print(header)
    print("-" * (len(header) + 8))
    for ours, ref in comparisons:
        name, value = references[ref]
        rate = results[ours].best
        r = rate / value
        target = TARGETS.get((ours, ref))
        verdict = "" if target is None else ("met" if r >= target else "NOT met")
        target_text = "-" if target is None else f">= {target:g}"
        label = {
            "serial": "SerialSampler",
            "cpu": "CpuSampler",
            "gpu": "GpuSampler",
            "ale": "AtariVectorEnv",
            "batched": "BatchedSampler",
        }[ours]
        print(
            f"{label:<16}{rate:>10,.0f}  {name:<34}{value:>10,.0f}{r:>8.2f}"
            f"{target_text:>10}  {verdict}"
        )


def print_load(when: str) -> None:
    """Another process on this 2-core machine slows every figure (the parallel ones most)."""
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"load average {when}: {load} (1, 5, 15 min) on {os.cpu_count()} cores")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a few seconds, no timing claims")
    args = parser.parse_args()
    sizes = QUICK if args.quick else FULL
    if args.quick:
        print("--quick: tiny batches, one timed batch each; these numbers mean nothing.")
    print(
        "Env steps/s (1 step = 4 frames); each case in its own fresh process, warmed up "
        f"({sizes.warmup_batches} batch(es)), then timed: best and median group."
    )
    print_load("before")
    cases = {
        "limit": (measure_alone,),
        "per core": (measure_alone_per_core,),
        "serial": (measure_sampler, "serial"),
        "cpu": (measure_sampler, "cpu"),
        "gpu": (measure_sampler, "gpu"),
        "gym rgb": (measure_gymnasium, "rgb"),
        "gym grayscale": (measure_gymnasium, "grayscale"),
        "ale": (measure_ale_vector,),
        "batched": (measure_batched_ale,),
    }
    results = {key: Result([]) for key in cases}
    for round_ in range(sizes.rounds):
        print(f"round {round_ + 1} of {sizes.rounds} ...", flush=True)
        for key, (func, *args) in cases.items():
            results[key].rates.extend(in_fresh_process(func, *args, sizes).rates)
    print_rates(results, sizes)
    print_ratios(results)
    print_load("after")


if __name__ == "__main__":
    main()
