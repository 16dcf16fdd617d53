"""A small end-to-end use of rl-arrays, as a sampler will use it.

Worker processes each step a few toy environments (a random walk on a line) and write
their steps into one ``[T, B]`` ``Samples`` buffer on shared memory; the parent then reads
the batch as torch tensors without copying and summarises it.
"""

from __future__ import annotations

import itertools
import multiprocessing as mp
import time
from multiprocessing.process import BaseProcess

import numpy as np

from rl_arrays import (
    AgentSamples,
    BatchSpec,
    EnvSamples,
    Samples,
    as_count,
    buffer_from_example,
    torchify_buffer,
    valid_mean,
)

GOAL = 5  # the walk ends, and restarts at 0, when |position| reaches GOAL


def _example() -> Samples:
    """One step's worth of data, with no leading dims; the buffer copies its shapes."""
    agent = AgentSamples(action=np.int64(0), prev_action=np.int64(0), agent_info=None)
    env = EnvSamples(
        observation=np.zeros(1, np.float32),
        reward=np.float32(0),
        prev_reward=np.float32(0),
        done=False,
        env_info=None,
    )
    return Samples(agent=agent, env=env)


def _worker(samples: Samples, env_slice: slice, seed: int) -> None:
    """Step the environments of columns ``env_slice`` for T steps, writing each step."""
    rng = np.random.default_rng(seed)
    mine = samples[:, env_slice]  # views into the shared buffer
    n_envs = mine.env.reward.shape[1]
    position = np.zeros(n_envs, np.float32)
    prev_action, prev_reward = np.zeros(n_envs, np.int64), np.zeros(n_envs, np.float32)
    for t in range(mine.env.reward.shape[0]):
        action = rng.integers(0, 2, n_envs)  # 0: left, 1: right
        observation = position.copy()
        position += 2 * action - 1
        done = np.abs(position) >= GOAL
        reward = np.where(done, 1.0, -0.1).astype(np.float32)
        mine[t] = Samples(
            AgentSamples(action, prev_action, None),
            EnvSamples(observation[:, None], reward, prev_reward, done, None),
        )
        position[done] = 0
        prev_action, prev_reward = action, reward


def fill_samples(
    T: int = 64, B: int = 8, n_workers: int = 2, start_method: str = "spawn"
) -> Samples:
    """A ``[T, B]`` batch on shared memory, filled by ``n_workers`` processes."""
    spec = BatchSpec(T, B)
    expected = f"an integer from 1 to B={spec.B}"
    count = as_count("n_workers", n_workers, 1, expected=expected)  # 2.0 too
    if count > spec.B:
        raise ValueError(f"n_workers must be {expected}, got {n_workers!r}")
    samples = buffer_from_example(_example(), (spec.T, spec.B), share_memory=True)
    bounds = np.linspace(0, spec.B, count + 1).astype(int)
    ctx = mp.get_context(start_method)
    # (typeshed types get_context(str) as a BaseContext, without the Process class that the
    # context of each start method has)
    ProcessCls: type[BaseProcess] = ctx.Process  # type: ignore[attr-defined]
    workers = [
        ProcessCls(target=_worker, args=(samples, slice(lo, hi), rank), daemon=True)
        for rank, (lo, hi) in enumerate(itertools.pairwise(bounds))
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
        if w.exitcode != 0:
            raise RuntimeError(f"demo worker {w.name} failed with exit code {w.exitcode}")
    return samples


def run_demo(T: int = 64, B: int = 8, n_workers: int = 2, start_method: str = "spawn") -> str:
    """Fill a batch with ``fill_samples`` and describe it."""
    start = time.perf_counter()
    samples = fill_samples(T, B, n_workers, start_method)
    elapsed = time.perf_counter() - start
    batch = torchify_buffer(samples)  # zero-copy views of the shared arrays
    shared = batch.env.reward.data_ptr() == samples.env.reward.ctypes.data
    return (
        f"filled Samples[T={T}, B={B}] ({T * B} steps) from {n_workers} "
        f"{start_method} workers in {elapsed:.2f}s\n"
        f"  observation {tuple(batch.env.observation.shape)} {batch.env.observation.dtype}, "
        f"action {tuple(batch.agent.action.shape)} {batch.agent.action.dtype}\n"
        f"  {int(batch.env.done.sum())} episodes finished, "
        f"mean reward {float(valid_mean(batch.env.reward)):+.3f}, "
        f"right moves {float(batch.agent.action.float().mean()):.2f}\n"
        f"  read by torch without a copy: {shared}"
    )
