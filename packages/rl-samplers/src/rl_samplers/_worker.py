"""The worker process of the parallel samplers, and the control block it shares with the
main process.

The main process releases each worker's semaphore with a command in ``state``; a worker
answers through the ``results`` queue: the trajectory infos it completed, then ``None``.
Nothing waits on a barrier, so the main process can wait with a timeout, notice a dead or
failing worker, and raise its traceback instead of hanging.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import traceback
from collections.abc import Iterable
from multiprocessing.context import BaseContext
from typing import Any

import numpy as np

from rl_arrays import np_mp_array

from ._env import Env
from ._traj_info import set_traj_info_kwargs

__all__ = ["Control", "initialize_worker", "sampling_process"]

# Commands, written to ctrl.command before releasing the workers.
COLLECT, EVALUATE, QUIT = 0, 1, 2


class Control:
    """Shared between the main process and its workers (passed at process creation)."""

    def __init__(self, ctx: BaseContext, n_workers: int):
        self.start = [ctx.Semaphore(0) for _ in range(n_workers)]
        self.results = ctx.Queue()
        self.errors = ctx.Queue()
        self.state = np_mp_array(4, np.int64)  # command, itr, stop_eval, double-buffer index

    def command(self, command: int, itr: int = 0, db_idx: int = 0) -> None:
        self.state[:] = (command, itr, 0, db_idx)
        for semaphore in self.start:
            semaphore.release()


def _exit_with(main_pid: int) -> None:
    """Never outlive the main process: on Linux the kernel kills this worker when its
    parent dies (the main process, or the fork server that dies with it); Ctrl-C is left
    to the main process, which ends the workers itself."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    try:
        os.kill(main_pid, 0)
    except ProcessLookupError:  # it died before we could ask to follow it
        os._exit(1)


def initialize_worker(
    rank: int,
    seed: int | None = None,
    cpu: int | Iterable[int] | None = None,
    torch_threads: int | None = None,
) -> None:
    """Pin the worker to its cpus, seed torch, and limit torch's threads (many workers
    each running several threads would oversubscribe the machine)."""
    import torch

    if cpu is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, [cpu] if isinstance(cpu, int) else list(cpu))
    torch.set_num_threads(torch_threads or 1)
    if seed is not None:
        torch.manual_seed(seed)


def sampling_process(common: dict[str, Any], worker: dict[str, Any]) -> None:
    """Worker main: make envs and collectors, then serve commands until told to quit.
    Any exception is sent to the main process with its traceback."""
    ctrl: Control = common["ctrl"]
    rank = worker["rank"]
    envs: list[Env] = []
    eval_envs: list[Env] = []
    try:
        _exit_with(common["main_pid"])
        initialize_worker(rank, worker["seed"], worker["cpus"], worker["torch_threads"])
        set_traj_info_kwargs(common["TrajInfoCls"], common["traj_info_kwargs"])
        collector_initialize = getattr(common.get("agent"), "collector_initialize", None)
        if collector_initialize is not None:  # this worker's environments among all
            collector_initialize(global_B=worker["global_B"], env_ranks=worker["env_ranks"])
        envs = [common["EnvCls"](**common["env_kwargs"]) for _ in worker["env_seeds"]]
        for env, seed in zip(envs, worker["env_seeds"], strict=True):
            env.seed(seed)
        collector = common["CollectorCls"](
            rank=rank,
            envs=envs,
            samples_np=worker["buffers"][0],
            batch_T=common["batch_T"],
            TrajInfoCls=common["TrajInfoCls"],
            agent=common.get("agent"),
            env_seeds=worker["env_seeds"],
            **worker.get("collector_kwargs", {}),
        )
        agent_inputs, traj_infos = collector.start_envs(common["max_decorrelation_steps"])
        collector.start_agent()
        eval_collector = None
        if worker["eval_env_seeds"]:
            eval_envs = [
                common["EnvCls"](**common["eval_env_kwargs"]) for _ in worker["eval_env_seeds"]
            ]
            for env, seed in zip(eval_envs, worker["eval_env_seeds"], strict=True):
                env.seed(seed)
            eval_collector = common["eval_CollectorCls"](
                eval_envs,
                common.get("agent"),
                common["TrajInfoCls"],
                common["eval_max_T"],
                **worker.get("eval_collector_kwargs", {}),
            )
        ctrl.results.put(None)  # ready
        while True:
            ctrl.start[rank].acquire()
            command, itr, db_idx = int(ctrl.state[0]), int(ctrl.state[1]), int(ctrl.state[3])
            if command == QUIT:
                break
            if command == EVALUATE:
                if eval_collector is not None:  # (a worker may have no evaluation envs)
                    stop = _StopFlag(ctrl.state)
                    eval_collector.collect_evaluation(itr, stop=stop, report=ctrl.results.put)
            else:
                collector.samples_np = worker["buffers"][db_idx]
                collector.reset_if_needed(agent_inputs)
                agent_inputs, traj_infos, completed = collector.collect_batch(
                    agent_inputs, traj_infos, itr
                )
                for info in completed:
                    ctrl.results.put(info)
            ctrl.results.put(None)
    except BaseException:
        ctrl.errors.put((rank, traceback.format_exc()))
        raise
    finally:
        for env in envs + eval_envs:
            env.close()


class _StopFlag:
    """The main process raises it when enough evaluation episodes are in."""

    def __init__(self, state: np.ndarray):
        self.state = state

    @property
    def value(self) -> bool:
        return bool(self.state[2])
