"""The parallel sampler: worker processes step the environments into one shared batch.

Who runs the agent is its choice: each worker runs a copy of it, whose parameters live in
shared memory (rlpyt's ``CpuSampler``), or the main process acts for every worker at once, as
an action server (``GpuSampler``; with two groups of workers taking turns,
``AlternatingSampler`` and ``NoOverlapAlternatingSampler``): see ``_action_server``.  rlpyt's
names are presets of ``ParallelSampler``, at the end of this module.  Workers start with the platform's default method or ``start_method`` ("fork",
"forkserver", "spawn"); with the latter two the environment class, its kwargs and the agent
must pickle.  A worker whose code raises makes ``obtain_samples`` raise a ``RuntimeError``
with its traceback; one that dies, or says nothing for ``worker_timeout`` seconds, a
``WorkerError`` naming it.  Either way every worker is ended first, as ``shutdown`` (or
leaving a ``with`` block) does.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import math
import multiprocessing as mp
import os
import signal
import time
from collections.abc import Callable, Iterable
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any, Literal, NoReturn

import numpy as np
import psutil
import torch.multiprocessing  # noqa: F401  (registers the pickling of shared tensors)

from rl_arrays import EnvSpaces, np_mp_array, signals_held_for_children

from ._action_server import ActionServer, Alternating
from ._agent import SamplerAgent
from ._base import BaseSampler
from ._collectors import BaseCollector, CpuResetCollector, SerialEvalCollector
from ._gpu import GpuEvalCollector, GpuResetCollector
from ._traj_info import TrajInfo
from ._worker import (
    COLLECT,
    DONE,
    ERROR,
    EVALUATE,
    QUIT,
    WorkerError,
    WorkerTimeout,
    sampling_process,
)

__all__ = [
    "AlternatingSampler",
    "CpuSampler",
    "GpuSampler",
    "NoOverlapAlternatingSampler",
    "ParallelSampler",
    "ParallelSamplerBase",
]

WORKER_START_TIMEOUT = 300.0  # (at least: imports and making the envs may take a while)

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


class ParallelSampler(BaseSampler):
    """Worker processes, each stepping a share of the ``batch_B`` environments.

    ``action_server``: False, each worker runs its own copy of the agent (on the CPU,
    parameters shared with this process's agent); True, workers only step environments and
    this process selects every action in one agent call per step (``ActionServer``), then
    ``alternating`` may split the workers in two groups that take turns (``"overlap"`` or
    ``"no_overlap"``).  The collectors default to those the choice needs.

    ``worker_timeout``: seconds a worker may take to answer (a batch, an evaluation, a step
    of the action server) before the run stops with a ``WorkerTimeout`` naming it.

    Evaluation with agents in the workers: each worker runs its share of
    ``eval_max_trajectories`` (in proportion to its evaluation envs), so which episodes count
    does not depend on timing."""

    def __init__(
        self,
        *args: Any,
        action_server: bool = False,
        alternating: Alternating = None,
        CollectorCls: type[BaseCollector] | None = None,
        eval_CollectorCls: type | None = None,
        start_method: StartMethod | None = None,
        worker_timeout: float = 300.0,
        **kwargs: Any,
    ):
        if alternating is not None and not action_server:
            raise ValueError("alternating groups of workers need the action server")
        if CollectorCls is None:
            CollectorCls = GpuResetCollector if action_server else CpuResetCollector
        if eval_CollectorCls is None:
            eval_CollectorCls = GpuEvalCollector if action_server else SerialEvalCollector
        super().__init__(
            *args, CollectorCls=CollectorCls, eval_CollectorCls=eval_CollectorCls, **kwargs
        )
        self.server = ActionServer(self, alternating) if action_server else None
        self.agent_in_workers = not action_server
        # The action server stops an evaluation once enough episodes are in: workers send
        # each evaluation episode as it ends.
        self.report_evaluation = action_server
        if start_method is not None and start_method not in mp.get_all_start_methods():
            raise ValueError(
                f"start_method must be one of {mp.get_all_start_methods()}, got {start_method!r}"
            )
        if (
            isinstance(worker_timeout, bool)
            or not isinstance(worker_timeout, (int, float))
            or not 0 < worker_timeout < math.inf
        ):
            raise ValueError(f"worker_timeout must be seconds > 0, got {worker_timeout!r}")
        self.start_method = start_method
        self.worker_timeout = float(worker_timeout)
        self.workers: list[BaseProcess] = []
        self.links: list[Connection] = []  # this process's end of each worker's link
        self.child_ends: list[Connection] = []  # the next worker's ends, closed once it runs
        self._busy: set[int] = set()  # the workers that owe an answer
        self._exit_hook: Callable[[], None] | None = None  # kills the workers at exit

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
        self.global_B = B * world_size
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
        self.stop_flag = np_mp_array(1, np.int64)  # the action server's "stop evaluating"
        common = dict(
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
            stop=self.stop_flag,
            report_evaluation=self.report_evaluation,
        )
        self.splits = np.array_split(np.arange(B), n_workers)
        self.eval_splits = np.array_split(np.arange(self.eval_n_envs), n_workers)
        if self.server is not None:
            self.server.prepare(ctx, examples)
        try:
            for w, (envs, eval_envs) in enumerate(zip(self.splits, self.eval_splits, strict=True)):
                start, stop = int(envs[0]), int(envs[-1]) + 1
                link, child_link = ctx.Pipe()
                self.child_ends.append(child_link)
                worker = dict(
                    rank=w,
                    link=child_link,
                    seed=int(worker_seeds[w]),
                    cpus=workers_cpus[w] if workers_cpus else None,
                    torch_threads=affinity.get("worker_torch_threads", 1),
                    env_seeds=[env_seeds[b] for b in envs],
                    global_B=self.global_B,
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
                with signals_held_for_children(ctx.get_start_method()):  # (none ends it early)
                    process.start()
                self.workers.append(process)
                self.links.append(link)
                self._busy.add(w)  # (until it says it is ready)
                # Only the worker holds its ends now (a later fork does not inherit them), so
                # they close when it ends, however it ends.
                for end in self.child_ends:
                    end.close()
                self.child_ends.clear()
                if self.server is not None:
                    self.server.worker_started(w, process)
            # Workers ignore SIGTERM, which is how multiprocessing ends daemon children at exit
            # (then waits for them): a script that ends without shutdown() would hang there.
            # Registered after multiprocessing's own exit hook, this one runs first.
            self._exit_hook = functools.partial(_kill_at_exit, self.workers)
            atexit.register(self._exit_hook)
        except BaseException:
            self.shutdown()
            raise
        self.gather(max(self.worker_timeout, WORKER_START_TIMEOUT))  # every worker is ready
        if self.server is not None:
            self.server.workers_ready()

    def _initialize_agent(
        self, agent: SamplerAgent, spaces: EnvSpaces, global_B: int, env_ranks: Iterable[int]
    ) -> None:
        share = self.agent_in_workers  # (the workers' copies share its parameters)
        agent.initialize(spaces, share_memory=share, global_B=global_B, env_ranks=list(env_ranks))

    def _worker_extras(self, rank: int) -> dict[str, Any]:
        """Extra arguments of worker ``rank`` (pipe ends for the worker alone go in
        ``self.child_ends``: they are closed once it has started)."""
        if self.server is not None:
            return self.server.worker_extras(rank)
        limit, n_envs = self.eval_max_trajectories, len(self.eval_splits[rank])
        if limit is None or not n_envs:
            return {}
        share = -(-limit * n_envs // self.eval_n_envs)  # (rounded up: the shares cover it)
        return dict(eval_collector_kwargs=dict(max_trajectories=share))

    # ------------------------------------------------------------------ talking to workers

    def command(self, command: int, itr: int = 0, db_idx: int = 0) -> None:
        self.stop_flag[0] = 0
        self._busy = set(range(len(self.links)))
        for w, link in enumerate(self.links):
            try:
                link.send((command, itr, db_idx))
                continue
            except OSError:  # (its end is closed)
                pass
            self._died(w)

    def gather(self, timeout: float | None = None, answered: Iterable[int] = ()) -> list[TrajInfo]:
        """The workers' answers to the last command (but those in ``answered``): their
        trajectory infos, worker by worker.  Waits without polling: for an answer, or a
        worker's end; raises if one fails, dies, or says nothing for ``timeout`` seconds
        (``worker_timeout``)."""
        timeout = self.worker_timeout if timeout is None else timeout
        answered = set(answered)
        waiting = [w for w in range(len(self.workers)) if w not in answered]
        infos: dict[int, list[TrajInfo]] = {w: [] for w in waiting}
        deadline = time.monotonic() + timeout
        while waiting:
            ends: dict[Any, int] = {self.links[w]: w for w in waiting}
            ends.update({self.workers[w].sentinel: w for w in waiting})
            ready = wait(list(ends), max(deadline - time.monotonic(), 0))
            if not ready:
                self._timed_out(waiting, timeout)
            for w in sorted({ends[end] for end in ready}):
                done = self.receive(w, infos[w])
                if done:
                    waiting.remove(w)
        return [info for w in sorted(infos) for info in infos[w]]

    def receive(self, w: int, infos: list[TrajInfo]) -> bool:
        """Take in what worker ``w`` has sent (into ``infos``); True once it said it is
        done.  Raises if it failed or died."""
        link = self.links[w]
        try:
            while link.poll():
                kind, payload = link.recv()
                if kind == ERROR:
                    self.shutdown()
                    raise RuntimeError(f"sampler worker {w} failed:\n{payload}")
                if kind == DONE:
                    infos.extend(payload)
                    self._busy.discard(w)
                    return True
                infos.append(payload)  # (INFO: one evaluation episode)
            closed = False
        except (EOFError, OSError):  # its end is closed: it is gone
            closed = True
        if closed or not self.workers[w].is_alive():
            self._died(w)
        return False

    def _died(self, w: int) -> NoReturn:
        """End every worker, then raise a ``WorkerError`` naming worker ``w``, which died."""
        process = self.workers[w]
        process.join(timeout=1.0)  # (its end may close just before it can be reaped)
        message = f"sampler worker {process.name} (pid {process.pid}) "
        self.shutdown()
        raise WorkerError(message + _how_it_ended(process.exitcode), process.name, process.pid)

    def _timed_out(self, late: list[int], timeout: float) -> NoReturn:
        """End every worker (the ``late`` ones at once), then raise a ``WorkerTimeout``."""
        processes = [self.workers[w] for w in late]
        names = ", ".join(f"{p.name} (pid {p.pid}, {_state(p.pid)})" for p in processes)
        self.shutdown(kill=late)
        raise WorkerTimeout(
            f"sampler worker{'s' * (len(late) > 1)} {names} did not answer within "
            f"{timeout:g} s (the sampler's worker_timeout)",
            processes[0].name,
            processes[0].pid,
        )

    def failed(self, w: int) -> NoReturn:
        """Worker ``w`` missed a step: raise its error, its end, or (it runs) a timeout."""
        self.receive(w, [])
        if wait([self.workers[w].sentinel], 0):  # (ending: its sentinel came before its exit)
            self._died(w)
        self._timed_out([w], self.worker_timeout)

    # ------------------------------------------------------------------ the life cycle

    def launch(
        self, affinity: dict[str, Any] | None, seed: int | None, rank: int, examples: dict[str, Any]
    ) -> None:
        """Start the workers of an allocated sampler (an asynchronous sampler's second
        stage, in its own process)."""
        self._launch_workers(affinity, seed, rank, examples)

    def refresh_agent(self) -> None:
        """Make the latest parameters visible to the agent that acts: the workers' copies
        share this process's (an action server acts with this process's own)."""
        if self.asynchronous or self.server is not None:
            super().refresh_agent()
        else:
            self.agent.sync_shared_memory()

    def collect(self, itr: int, db_idx: int) -> list[TrajInfo]:
        if self.server is not None:
            return self.server.collect(itr, db_idx)
        self.refresh_agent()
        self.command(COLLECT, itr, db_idx)
        return self.gather()

    def evaluate_agent(self, itr: int) -> list[TrajInfo]:
        if self.eval_n_envs == 0:
            raise RuntimeError("this sampler was made with eval_n_envs=0")
        if self.server is not None:
            return self.server.evaluate(itr)
        self.refresh_agent()
        self.command(EVALUATE, itr)
        return self.gather()[: self.eval_max_trajectories]

    def shutdown(self, kill: Iterable[int] = ()) -> None:
        """End every worker: ask those waiting for a command to quit (they close their
        envs), kill those busy with one (they would not hear; they ignore SIGTERM, which a
        scheduler sends the whole process group, and SIGKILL ends a stopped process too);
        then close the pipes.  Shared memory is freed with the last process using it."""
        if self._exit_hook is not None:
            atexit.unregister(self._exit_hook)
            self._exit_hook = None
        workers, self.workers = self.workers, []
        links, self.links = self.links, []
        kill, busy, self._busy = set(kill), self._busy, set()
        for w, (process, link) in enumerate(zip(workers, links, strict=True)):
            if w in kill or w in busy:
                process.kill()
            else:
                with contextlib.suppress(OSError):  # (it is gone)
                    link.send((QUIT, 0, 0))
        deadline = time.monotonic() + 5
        for process in workers:
            process.join(timeout=max(deadline - time.monotonic(), 0))
        for process in workers:
            if process.is_alive():
                process.kill()
                process.join(timeout=5)
        for end in links + self.child_ends:
            end.close()
        self.child_ends.clear()
        if self.server is not None:
            self.server.close()


def _kill_at_exit(workers: list[BaseProcess]) -> None:
    """At interpreter exit, the workers of a sampler that was not shut down: killed (they
    hold nothing that a clean exit would save)."""
    for process in workers:
        if process.is_alive():
            process.kill()
            process.join(timeout=5)


def _how_it_ended(exitcode: int | None) -> str:
    if exitcode is None:
        return "closed its pipe"
    if exitcode < 0:
        try:
            return f"was killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"was killed by signal {-exitcode}"
    return f"exited with code {exitcode}"


def _state(pid: int | None) -> str:
    """What the process is doing, as the OS says ("stopped" after a SIGSTOP)."""
    try:
        return str(psutil.Process(pid).status())
    except (psutil.Error, ValueError):
        return "state unknown"


ParallelSamplerBase = ParallelSampler  # (rlpyt's name of what the parallel samplers shared)


# rlpyt's parallel samplers: presets of ParallelSampler.


class CpuSampler(ParallelSampler):
    """Each worker steps its environments with its own copy of the agent."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)


class GpuSampler(ParallelSampler):
    """Workers step environments; this process acts for all of them in one batch."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, action_server=True, **kwargs)


class AlternatingSampler(ParallelSampler):
    """The action server with two groups of workers whose stepping overlaps: needs an even
    number of workers; a recurrent agent must keep one state per group."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, action_server=True, alternating="overlap", **kwargs)


class NoOverlapAlternatingSampler(ParallelSampler):
    """Alternating, but one group's environments step only once the other group's are done:
    two workers pinned to the same core never compete for it."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, action_server=True, alternating="no_overlap", **kwargs)
