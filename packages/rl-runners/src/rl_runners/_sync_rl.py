"""Synchronous multi-process runners: a full sampler-agent-algorithm replica in each process,
gradients all-reduced by ``DistributedDataParallel`` (NCCL on GPUs, gloo on CPUs).

Each process samples its own batch (an iteration covers ``world_size`` times the sampler
batch); rank 0 gathers the trajectories, evaluates, logs and saves, and the others follow its
decision to stop. Start with ``SyncRl(..., affinity=[aff_0, aff_1, ...])`` (this process is
rank 0 and starts the others) or under ``torchrun``. A rank that fails ends the job, and rank
0 raises its traceback. Details: the package README, "Synchronous multi-process runners".
"""

from __future__ import annotations

import multiprocessing as mp
import multiprocessing.connection
import os
import signal
import socket
import sys
import time
import traceback
from collections.abc import Mapping, Sequence
from multiprocessing.process import BaseProcess
from multiprocessing.queues import SimpleQueue
from types import FrameType
from typing import Any, TypeAlias

import psutil
import torch.distributed as dist

from ._evaluator import Evaluator
from ._group import ProcessGroup
from ._logger import logger
from ._minibatch_rl import MinibatchRl
from ._protocols import AgentProtocol, AlgoProtocol, SamplerProtocol
from ._seed import make_seed

__all__ = ["SyncRl", "SyncRlEval", "SyncRlMixin", "find_port"]

_TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
_MAX_TRACEBACK = 8000  # characters of a failed rank's traceback passed back to rank 0
_FAILURE_WAIT_S = 5.0  # how long rank 0, failing, looks for another rank's failure as cause
# What the local ranks tell rank 0: ("started" | "failed" | "finished", rank, traceback or "")
_Messages: TypeAlias = "SimpleQueue[tuple[str, int, str]]"


def find_port() -> int:
    """A TCP port on 127.0.0.1 that is free now, for a local job's rendezvous."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _launched_by_torchrun() -> bool:
    return all(name in os.environ for name in _TORCHRUN_VARS)


class SyncRl(MinibatchRl):
    """``MinibatchRl`` in ``world_size`` processes (see the module), on a ``ProcessGroup``.

    ``affinity``: a list of affinity dicts, one per process (``[{}, {}]`` for two plain CPU
    processes). ``start_method``: how local processes start (``"spawn"`` by default); the
    runner is pickled for spawn and forkserver, so its parts' classes must be importable.
    The agent needs ``data_parallel()``; ``leave_data_parallel()``, if it has one, is called
    at the end, before the process group is destroyed.
    """

    def __init__(
        self,
        algo: AlgoProtocol,
        agent: AgentProtocol,
        sampler: SamplerProtocol,
        n_steps: int | float,
        seed: int | None = None,
        affinity: Sequence[Mapping[str, Any]] | Mapping[str, Any] | None = None,
        *,
        start_method: str = "spawn",
        **kwargs: Any,
    ):
        if start_method not in mp.get_all_start_methods():
            raise ValueError(
                f"start_method must be one of {mp.get_all_start_methods()}, got {start_method!r}"
            )
        if not hasattr(agent, "data_parallel"):
            raise TypeError(
                f"agent ({type(agent).__name__}) lacks data_parallel(), which SyncRl calls to "
                "all-reduce gradients across processes"
            )
        self.start_method = start_method
        self._torchrun = _launched_by_torchrun()
        if self._torchrun:
            rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
            local_rank = int(os.environ.get("LOCAL_RANK", rank))
            own = _torchrun_affinity(affinity, local_rank)
            self._affinities = None
        else:
            self._affinities = _local_affinities(affinity)
            rank, world_size = 0, len(self._affinities)
            own = self._affinities[0]
        self.group: ProcessGroup = ProcessGroup(rank, world_size)
        super().__init__(algo, agent, sampler, n_steps, seed, own, group=self.group, **kwargs)

    def train(self) -> None:
        """Run the job: join it under torchrun, else start the local ranks and run rank 0."""
        if self._torchrun:
            self._join("env://")
            try:
                self._run(None)
                # Every rank done before any tears its connections down: a rank whose peer
                # closed them first could abort in gloo's teardown (seen under load).
                self.group.barrier()
            finally:
                self.group.leave(self.agent)
        else:
            self._train_local()

    def resume(self, path: str | os.PathLike) -> None:
        """Continue a run from its snapshot ``path`` (see ``MinibatchRl.resume``; under
        torchrun every process calls it, with the same path). Every rank loads the agent, the
        optimizer and the counters; rank 0 also its environments' state and its random
        generators. The other ranks' environments restart and their generators are seeded
        anew: a snapshot holds rank 0's only."""
        restore = self.checkpointer.for_resume(self, path)
        if self.seed is None:
            self.seed = restore[1]["runner_state"]["seed"]
        if restore[2] is not None and self.rank == 0:
            logger.log(
                f"Resuming {self.world_size} processes: rank 0's environments continue, the "
                "other ranks' restart (the snapshot holds rank 0's)."
            )
        if self._torchrun:
            self._join("env://")
            try:
                self._run(restore if self.rank == 0 else (*restore[:2], None))
                self.group.barrier()
            finally:
                self.group.leave(self.agent)
        else:
            self._train_local(restore)

    def _join(self, init_method: str) -> None:
        """Join the process group (all ranks agree on the seed), and keep quiet unless rank 0."""
        if self.rank > 0:
            _detach_logger(self.rank)
        self.seed = self.group.join(init_method, self.affinity, self.seed)

    def _train_local(self, restore: tuple | None = None) -> None:
        if self.seed is None:
            self.seed = make_seed()
        rank_restore = None if restore is None else (*restore[:2], None)  # (not rank 0's envs)
        port = find_port()
        ctx = mp.get_context(self.start_method)
        messages: _Messages = ctx.SimpleQueue()
        # (typeshed types get_context(str) as a BaseContext, without the Process class that
        # the context of each start method has)
        ProcessCls: type[BaseProcess] = ctx.Process  # type: ignore[attr-defined]
        workers = [
            ProcessCls(
                target=_run_rank,
                args=(self, rank, port, messages, rank_restore),
                name=f"rank {rank}",
            )
            for rank in range(1, self.world_size)
        ]
        failure = None
        try:
            for worker in workers:
                worker.start()
            _wait_until_started(workers, messages)
            try:
                self._join(f"tcp://127.0.0.1:{port}")
                self._run(restore)
            except BaseException as error:
                # (Ctrl-C or an exit: at once, no waiting for a cause elsewhere)
                wait = _FAILURE_WAIT_S if isinstance(error, Exception) else 0.0
                failure = _failed_rank(workers, messages, wait)
                if failure is None:
                    raise
            if failure is None:
                failure = _join_workers(workers, messages)
        finally:
            _stop(workers)
            if dist.is_initialized():
                self.group.leave(self.agent)
            messages.close()
        if failure is not None:
            raise RuntimeError(failure)


class SyncRlEval(SyncRl):
    """``SyncRl`` given an ``Evaluator(stop_return)``; only rank 0 evaluates."""

    def __init__(self, *args: Any, stop_return: float | None = None, **kwargs: Any):
        super().__init__(*args, evaluator=Evaluator(stop_return), **kwargs)


SyncRlMixin = SyncRl  # (the name of what SyncRl and SyncRlEval shared)


# ------------------------------------------------------------------ helpers
def _local_affinities(
    affinity: Sequence[Mapping[str, Any]] | Mapping[str, Any] | None,
) -> list[dict[str, Any]]:
    if isinstance(affinity, Mapping) or affinity is None or isinstance(affinity, (str, bytes)):
        raise TypeError(
            "SyncRl's affinity is a list of affinity dicts, one per process (e.g. [{}, {}] "
            f"for two CPU processes), got {type(affinity).__name__}"
        )
    affinities = list(affinity)
    if not affinities or not all(isinstance(a, Mapping) for a in affinities):
        raise TypeError("SyncRl's affinity must be a non-empty list of dicts, one per process")
    return [dict(a) for a in affinities]


def _torchrun_affinity(
    affinity: Sequence[Mapping[str, Any]] | Mapping[str, Any] | None, local_rank: int
) -> dict[str, Any]:
    if affinity is None or isinstance(affinity, Mapping):
        return dict(affinity or {})
    affinities = list(affinity)
    if local_rank >= len(affinities):
        raise ValueError(
            f"LOCAL_RANK={local_rank} has no entry in the affinity list of {len(affinities)}"
        )
    return dict(affinities[local_rank])


def _detach_logger(rank: int) -> None:
    """A rank other than 0 writes no files (a forked one inherits rank 0's open files)."""
    logger.set_text_output(None)
    logger.set_tabular_output(None)
    logger.set_summary_writer(None)
    logger.set_snapshot_dir(None)
    logger.push_prefix(f"[rank {rank}] ")


def _run_rank(
    runner: SyncRl, rank: int, port: int, messages: _Messages, restore: tuple | None
) -> None:
    """A local rank's process (``restore``: what to resume from, without rank 0's
    environments).  Ctrl-C is left to rank 0, which stops this process with SIGTERM (raised
    here as SystemExit, so the sampler shuts down; in the training loop, where a first
    SIGTERM is a stop request that rank 0 decides on, with a second one)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    messages.put(("started", rank, ""))
    try:
        runner.group.rank = rank
        assert runner._affinities is not None  # (a local job's rank)
        runner.affinity = runner._affinities[rank]
        runner._join(f"tcp://127.0.0.1:{port}")
        runner._run(restore)
    except BaseException:
        messages.put(("failed", rank, traceback.format_exc()[-_MAX_TRACEBACK:]))
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)  # at once: closed connections end the other ranks' waits with an error
    # Done: what happens to the process from here on (torch's teardown) cannot spoil the run.
    messages.put(("finished", rank, ""))
    runner.group.leave(runner.agent)


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def _messages(messages: _Messages) -> list[tuple[str, int, str]]:
    received = []
    while not messages.empty():
        received.append(messages.get())
    return received


def _wait_until_started(
    workers: list[BaseProcess], messages: _Messages, timeout: float = 600
) -> None:
    """Wait until every local rank runs (an unpicklable runner or a failing import shows here,
    rather than as rank 0 waiting forever at the rendezvous)."""
    started: set[int] = set()
    deadline = time.monotonic() + timeout
    while len(started) < len(workers):
        for kind, rank, text in _messages(messages):
            if kind == "failed":
                raise RuntimeError(f"rank {rank} failed while starting:\n{text}")
            started.add(rank)
        for worker in workers:
            if worker.exitcode is not None and int(worker.name.split()[1]) not in started:
                raise RuntimeError(
                    f"{worker.name} exited with code {worker.exitcode} before it started "
                    "(see its output above; with spawn, the runner and everything in it must "
                    "pickle)"
                )
        if time.monotonic() > deadline:
            raise RuntimeError(f"local ranks did not start within {timeout:.0f} s")
        time.sleep(0.02)


def _failed_rank(
    workers: list[BaseProcess], messages: _Messages, wait: float = _FAILURE_WAIT_S
) -> str | None:
    """After rank 0 failed: the failure of another rank that caused it (its traceback, or
    how its process ended), or None when, within ``wait`` seconds, no other rank failed
    (rank 0's own error)."""
    # A rank that fails sends its traceback before it exits; rank 0 may notice the closed
    # connection before that rank's exit can be seen, longer before on a loaded machine.
    deadline = time.monotonic() + wait
    while True:
        failed = _failures(messages)
        dead = [worker for worker in workers if worker.exitcode not in (None, 0)]
        if dead and not failed:  # (its traceback, if any, was sent before it exited)
            failed = _failures(messages)
        if failed:
            return failed[0]
        if dead:
            return f"{dead[0].name} died (exit code {dead[0].exitcode}) without a traceback"
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        mp.connection.wait([w.sentinel for w in workers], timeout=min(left, 0.1))


def _failures(messages: _Messages) -> list[str]:
    """The failures reported in ``messages`` (read from it)."""
    return [
        f"rank {rank} failed:\n{text}"
        for kind, rank, text in _messages(messages)
        if kind == "failed"
    ]


def _join_workers(
    workers: list[BaseProcess], messages: _Messages, timeout: float = 60
) -> str | None:
    """After rank 0 finished: wait for the others; a failure of theirs, if any.  A rank that
    reported its work finished counts as finished, whatever its exit code."""
    deadline = time.monotonic() + timeout
    for worker in workers:
        worker.join(max(deadline - time.monotonic(), 0.1))
    received = _messages(messages)
    failed = [f"rank {rank} failed:\n{text}" for kind, rank, text in received if kind == "failed"]
    if failed:
        return failed[0]
    finished = {rank for kind, rank, _ in received if kind == "finished"}
    for rank, worker in enumerate(workers, start=1):
        if rank in finished:
            if worker.exitcode != 0:
                logger.log(
                    f"WARNING: {worker.name} exited with code {worker.exitcode} after "
                    "finishing its work"
                )
        elif worker.exitcode is None:
            return f"{worker.name} did not finish within {timeout:.0f} s of rank 0"
        else:
            return f"{worker.name} exited with code {worker.exitcode} before finishing"
    return None


def _stop(workers: list[BaseProcess], grace: float = 5.0) -> None:
    """End every local rank and whatever it started: SIGTERM twice (in its training loop a
    rank takes the first as a stop request), then SIGKILL on the rest."""
    workers = [worker for worker in workers if worker.pid is not None]  # (started ones)
    for _ in range(2):
        for worker in workers:
            if worker.is_alive():
                worker.terminate()
        time.sleep(0.05)
    deadline = time.monotonic() + grace
    for worker in workers:
        worker.join(max(deadline - time.monotonic(), 0.0))
    for worker in workers:
        if worker.is_alive():
            assert worker.pid is not None  # (a started one)
            _kill_tree(worker.pid)
            worker.join(5)


def _kill_tree(pid: int) -> None:
    try:
        process = psutil.Process(pid)
        for child in process.children(recursive=True):
            child.kill()
        process.kill()
    except psutil.NoSuchProcess:
        pass
