"""Parallel samplers: worker processes step the environments into one shared batch.

``CpuSampler``: each worker also runs a copy of the agent, whose parameters live in shared
memory.  Workers start with the platform's default method or ``start_method`` ("fork",
"forkserver", "spawn"); with the latter two the environment class, its kwargs and the agent
must pickle.  A worker that fails makes ``obtain_samples`` raise its traceback; ``shutdown``
(or leaving a ``with`` block) ends every worker.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
from collections.abc import Iterable
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from typing import Any, Literal

import numpy as np
import torch.multiprocessing  # noqa: F401  (registers the pickling of shared tensors)

from rl_arrays import EnvSpaces

from ._agent import SamplerAgent
from ._base import BaseSampler
from ._collectors import BaseCollector, CpuResetCollector, SerialEvalCollector
from ._traj_info import TrajInfo
from ._worker import COLLECT, EVALUATE, QUIT, Control, sampling_process

__all__ = ["CpuSampler", "ParallelSamplerBase"]

WORKER_START_TIMEOUT = 300.0

StartMethod = Literal["fork", "forkserver", "spawn"]


def _env_slice(samples_np: Any, start: int, stop: int) -> Any:
    """The ``[T, start:stop]`` part of a batch (``bootstrap_value`` is ``[B]`` only)."""
    agent = samples_np.agent
    if "bootstrap_value" in agent:
        agent = agent._replace(bootstrap_value=None)[:, start:stop]._replace(
            bootstrap_value=samples_np.agent.bootstrap_value[start:stop]
        )
    else:
        agent = agent[:, start:stop]
    return samples_np._replace(agent=agent, env=samples_np.env[:, start:stop])


class ParallelSamplerBase(BaseSampler):
    """Worker processes, each stepping a share of the ``batch_B`` environments."""

    agent_in_workers = True

    def __init__(self, *args: Any, start_method: StartMethod | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        if start_method is not None and start_method not in mp.get_all_start_methods():
            raise ValueError(
                f"start_method must be one of {mp.get_all_start_methods()}, got {start_method!r}"
            )
        self.start_method = start_method
        self.workers: list[BaseProcess] = []

    def initialize(
        self,
        agent: SamplerAgent,
        affinity: dict[str, Any] | None = None,
        seed: int | None = None,
        bootstrap_value: bool = False,
        traj_info_kwargs: dict[str, Any] | None = None,
        rank: int = 0,
        world_size: int = 1,
    ) -> dict[str, Any]:
        """Start the workers; return one example of every field."""
        B = self.batch_spec.B
        self._n_workers(affinity)  # (refuse a bad affinity before any work)
        env = self.EnvCls(**self.env_kwargs)
        try:
            self._initialize_agent(
                agent, env.spaces, B * world_size, range(rank * B, (rank + 1) * B)
            )
        finally:
            env.close()
        examples = self._examples_and_buffer(agent, bootstrap_value, traj_info_kwargs, shared=True)
        self.agent = agent
        self._global_B = B * world_size
        self._launch_workers(affinity, seed, rank, examples)
        return examples

    def _n_workers(self, affinity: dict[str, Any] | None) -> int:
        B = self.batch_spec.B
        workers_cpus = (affinity or {}).get("workers_cpus")
        n_workers = len(workers_cpus) if workers_cpus else min(os.cpu_count() or 1, B)
        if not 1 <= n_workers <= B:
            raise ValueError(f"{n_workers} workers cannot share {B} environments")
        return n_workers

    def _launch_workers(
        self, affinity: dict[str, Any] | None, seed: int | None, rank: int, examples: dict[str, Any]
    ) -> None:
        """Start the workers, each writing its slice of every buffer in ``self.buffers``,
        and wait until each has made its environments."""
        B = self.batch_spec.B
        affinity = affinity or {}
        workers_cpus = affinity.get("workers_cpus")
        n_workers = self._n_workers(affinity)
        env_seeds = self._env_seeds(seed, rank, B)
        eval_seeds = self._env_seeds(seed, rank, self.eval_n_envs, offset=B)
        worker_seeds = self._seeds(seed, rank).generate_state(n_workers)
        ctx = mp.get_context(self.start_method)
        self.ctrl = Control(ctx, n_workers)
        common = dict(
            ctrl=self.ctrl,
            EnvCls=self.EnvCls,
            env_kwargs=self.env_kwargs,
            eval_env_kwargs=self.eval_env_kwargs,
            CollectorCls=self.CollectorCls,
            eval_CollectorCls=self.eval_CollectorCls,
            TrajInfoCls=self.TrajInfoCls,
            traj_info_kwargs=self.traj_info_kwargs,
            batch_T=self.batch_spec.T,
            max_decorrelation_steps=self.max_decorrelation_steps,
            eval_max_T=self.eval_max_T,
            agent=self.agent if self.agent_in_workers else None,
            main_pid=os.getpid(),
        )
        splits = np.array_split(np.arange(B), n_workers)
        eval_splits = np.array_split(np.arange(self.eval_n_envs), n_workers)
        self._prepare_workers(ctx, examples, splits, eval_splits)
        for w, (envs, eval_envs) in enumerate(zip(splits, eval_splits, strict=True)):
            start, stop = int(envs[0]), int(envs[-1]) + 1
            worker = dict(
                rank=w,
                seed=int(worker_seeds[w]),
                cpus=workers_cpus[w] if workers_cpus else None,
                torch_threads=affinity.get("worker_torch_threads", 1),
                env_seeds=[env_seeds[b] for b in envs],
                global_B=self._global_B,
                env_ranks=[rank * B + int(b) for b in envs],
                eval_env_seeds=[eval_seeds[b] for b in eval_envs],
                buffers=[_env_slice(buffer, start, stop) for buffer in self.buffers],
                **self._worker_extras(w),
            )
            process = ctx.Process(
                target=sampling_process,
                args=(common, worker),
                name=f"sampler-worker-{w}",
                daemon=True,
            )
            process.start()
            self.workers.append(process)
        self._gather(WORKER_START_TIMEOUT)  # every worker made its envs

    def _initialize_agent(
        self, agent: SamplerAgent, spaces: EnvSpaces, global_B: int, env_ranks: Iterable[int]
    ) -> None:
        agent.initialize(spaces, share_memory=True, global_B=global_B, env_ranks=list(env_ranks))

    def _prepare_workers(
        self,
        ctx: BaseContext,
        examples: dict[str, Any],
        splits: list[np.ndarray],
        eval_splits: list[np.ndarray],
    ) -> None:
        """Hook: shared state the workers need beyond the batch (the GPU sampler's)."""

    def _worker_extras(self, rank: int) -> dict[str, Any]:
        """Hook: extra per-worker arguments."""
        return {}

    def _gather(
        self, timeout: float | None = None, max_infos: int | None = None, finished: int = 0
    ) -> list[TrajInfo]:
        """Trajectory infos from every worker until each says it is done (``finished``
        already did); raises at once if a worker fails or dies."""
        infos: list[TrajInfo] = []
        waited = 0.0
        while finished < len(self.workers):
            try:
                item = self.ctrl.results.get(timeout=0.5)
            except queue.Empty:
                self._check_workers()
                waited += 0.5
                if timeout is not None and waited > timeout:
                    self.shutdown()
                    raise TimeoutError(
                        f"sampler workers did not answer within {timeout:.0f}s"
                    ) from None
                continue
            if item is None:
                finished += 1
            else:
                infos.append(item)
                if max_infos is not None and len(infos) >= max_infos:
                    self.ctrl.state[2] = 1  # enough: tell the others to stop evaluating
        return infos

    def _check_workers(self) -> None:
        try:
            rank, trace = self.ctrl.errors.get_nowait()
        except queue.Empty:
            dead = [p for p in self.workers if not p.is_alive()]
            if not dead:
                return
            try:  # a dying worker's message may still be on its way
                rank, trace = self.ctrl.errors.get(timeout=2.0)
            except queue.Empty:
                rank, trace = dead[0].name, f"exit code {dead[0].exitcode}, no traceback"
        self.shutdown()
        raise RuntimeError(f"sampler worker {rank} failed:\n{trace}")

    def _refresh_agent(self) -> None:
        """Make the latest parameters visible to the workers' agent copies."""
        self.agent.sync_shared_memory()

    def _collect(self, itr: int, db_idx: int) -> list[TrajInfo]:
        """Fill ``self.buffers[db_idx]``; return the trajectory infos completed."""
        self._refresh_agent()
        self.ctrl.command(COLLECT, itr, db_idx)
        return self._gather()

    def evaluate_agent(self, itr: int) -> list[TrajInfo]:
        if self.eval_n_envs == 0:
            raise RuntimeError("this sampler was made with eval_n_envs=0")
        self._refresh_agent()
        self.ctrl.command(EVALUATE, itr)
        infos = self._gather(max_infos=self.eval_max_trajectories)
        return infos[: self.eval_max_trajectories]

    def shutdown(self) -> None:
        """End every worker (asking first, then terminating), freeing shared memory."""
        workers, self.workers = self.workers, []
        if not workers:
            return
        self.ctrl.state[:] = (QUIT, 0, 1, 0)
        for semaphore in self.ctrl.start:
            semaphore.release()
        for process in workers:
            process.join(timeout=5)
        for process in workers:
            if process.is_alive():
                process.terminate()
                process.join(timeout=5)


class CpuSampler(ParallelSamplerBase):
    """Each worker steps its environments with its own copy of the agent (on the CPU,
    parameters shared with the main process's agent)."""

    def __init__(
        self,
        *args: Any,
        CollectorCls: type[BaseCollector] = CpuResetCollector,
        eval_CollectorCls: type[SerialEvalCollector] = SerialEvalCollector,
        **kwargs: Any,
    ):
        super().__init__(
            *args, CollectorCls=CollectorCls, eval_CollectorCls=eval_CollectorCls, **kwargs
        )
