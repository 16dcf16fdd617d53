"""The worker process of the parallel samplers, and the pipes it shares with the main process.

Each worker has a ``link`` to the main process (one end of a socket pair): the main process
sends a command ``(COLLECT | EVALUATE | QUIT, itr, db_idx)``; the worker answers
``(DONE, trajectory infos)``, or ``(ERROR, traceback)`` before it exits, and, while the
action server evaluates, ``(INFO, info)`` as each episode ends.  The action-server samplers
add a ``Gate`` per worker for the per-step handshake.  Pipes and memfd shared memory pass to
children under fork, forkserver and spawn as file descriptors: nothing has a name in the file
system, so nothing outlives the processes, however they end (the README has the details).
"""

from __future__ import annotations

import contextlib
import os
import select
import sys
import traceback
from collections.abc import Iterable
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from rl_arrays import enter_child

from ._env import Env
from ._traj_info import set_traj_info_kwargs

__all__ = [
    "Gate",
    "WorkerError",
    "WorkerTimeout",
    "initialize_worker",
    "sampling_process",
]

# Commands, from the main process.
COLLECT, EVALUATE, QUIT = 0, 1, 2
# Answers, from a worker.
DONE, INFO, ERROR = "done", "info", "error"


class WorkerError(ChildProcessError):
    """A sampler worker died or stopped answering; ``worker`` (its name) and ``pid`` say which.

    (A worker whose code raised makes the sampler raise a ``RuntimeError`` with its traceback
    instead.)"""

    def __init__(self, message: str, worker: str = "", pid: int | None = None):
        super().__init__(message)
        self.worker, self.pid = worker, pid


class WorkerTimeout(WorkerError, TimeoutError):
    """A sampler worker did not answer within the sampler's ``worker_timeout``."""


class Gate:
    """A semaphore between two processes, over one end of a socket pair: ``release`` gives
    the other end a token (a byte), ``acquire`` takes one the other end gave.  With a
    ``timeout`` (seconds), ``acquire`` returns False when none came in time, or at once when
    the ``watch`` descriptor is ready (the sentinel of the process at the other end: it
    ended).  Raises ``EOFError`` when the other end is closed."""

    def __init__(self, conn: Connection):
        self.conn = conn
        self._watch: int | None = None
        self._poll: Any = None  # select.poll(), made at the first wait (it does not pickle)

    def __getstate__(self) -> dict[str, Any]:
        return {"conn": self.conn}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["conn"])  # type: ignore[misc]

    def watch(self, fd: int) -> None:
        self._watch, self._poll = fd, None

    def release(self) -> None:
        os.write(self.conn.fileno(), b"\1")

    def acquire(self, timeout: float | None = None) -> bool:
        fd = self.conn.fileno()
        if timeout is not None:
            if self._poll is None:
                self._poll = select.poll()
                for watched in (fd, self._watch):
                    if watched is not None:
                        self._poll.register(watched, select.POLLIN)
            if not any(ready == fd for ready, _ in self._poll.poll(max(timeout, 0) * 1000)):
                return False
        if not os.read(fd, 1):
            raise EOFError("the other end of the gate is closed")
        return True


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
    """Worker main: make envs and collectors, then serve commands until told to quit (or
    the main process is gone).  Any exception is sent to the main process with its
    traceback, and the worker exits with code 1."""
    link: Connection = worker["link"]
    rank = worker["rank"]
    envs: list[Env] = []
    eval_envs: list[Env] = []
    try:
        enter_child(common["main_pid"])
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
        stop = _StopFlag(common["stop"])
        # (The action server decides when to stop evaluating: it is told of each episode.)
        report = (lambda info: link.send((INFO, info))) if common["report_evaluation"] else None
        link.send((DONE, []))  # ready
        while True:
            try:
                command, itr, db_idx = link.recv()
            except EOFError:  # the main process closed its end: it is gone
                break
            if command == QUIT:
                break
            if command == EVALUATE:
                infos = []
                if eval_collector is not None:  # (a worker may have no evaluation envs)
                    infos = eval_collector.collect_evaluation(itr, stop=stop, report=report)
            else:
                collector.samples_np = worker["buffers"][db_idx]
                collector.reset_if_needed(agent_inputs)
                agent_inputs, traj_infos, infos = collector.collect_batch(
                    agent_inputs, traj_infos, itr
                )
            link.send((DONE, infos))
    except Exception:
        with contextlib.suppress(OSError):  # (the main process is gone)
            link.send((ERROR, traceback.format_exc()))
        sys.exit(1)  # (the main process raises the traceback: not printed twice)
    finally:
        for env in envs + eval_envs:
            env.close()


class _StopFlag:
    """The action server raises it when enough evaluation episodes are in."""

    def __init__(self, flag: np.ndarray):
        self.flag = flag

    @property
    def value(self) -> bool:
        return bool(self.flag[0])
