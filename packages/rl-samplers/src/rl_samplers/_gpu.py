"""The action-server sampler: workers only step environments; the main process selects
the actions of all ``batch_B`` environments in one agent call per step (on the agent's
device: a GPU, or the CPU).

Per step, each worker waits for ``act_ready``, steps its environments with the actions in
the shared step buffer, writes the results back (resetting done environments), and
releases ``obs_ready``; the main process waits for every worker's ``obs_ready``, then
computes the next actions.  Both are one ``Gate`` per worker (a socket pair: a token each
way), which the main process waits on together with the worker's end.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from typing import Any

import numpy as np
import torch

from rl_arrays import (
    AttrDict,
    EnvSpaces,
    EnvStep,
    buffer_from_example,
    numpify_buffer,
    torchify_buffer,
)

from ._agent import SamplerAgent
from ._collectors import BaseCollector, reset_envs, step_envs, update_prev
from ._env import Env
from ._parallel import ParallelSamplerBase
from ._traj_info import TrajInfo
from ._worker import COLLECT, EVALUATE, Gate

__all__ = [
    "AlternatingSampler",
    "GpuEvalCollector",
    "GpuResetCollector",
    "GpuSampler",
    "GpuWaitResetCollector",
    "NoOverlapAlternatingSampler",
]


def _step_buffer(examples: dict[str, Any], n: int) -> AttrDict:
    """Shared ``[n]`` arrays through which actions go out and observations come back."""
    fields = dict(
        observation=examples["observation"],
        action=examples["action"],
        reward=np.float32(0),
        done=np.bool_(False),
    )
    return AttrDict({k: buffer_from_example(v, (n,), share_memory=True) for k, v in fields.items()})


def _slice(step: AttrDict, start: int, stop: int) -> AttrDict:
    return AttrDict({k: v[start:stop] for k, v in step.items()})


class GpuResetCollector(BaseCollector):
    """Worker side: step the envs with the server's actions, reset done ones at once."""

    def __init__(
        self,
        *args: Any,
        step: AttrDict,
        act_ready: Gate,
        obs_ready: Gate,
        **kwargs: Any,
    ):
        super().__init__(*args, **kwargs)
        self.step, self.act_ready, self.obs_ready = step, act_ready, obs_ready

    def start_envs(self, max_decorrelation_steps: int = 0) -> tuple[Any, list[TrajInfo]]:
        inputs, traj_infos = reset_envs(
            self.envs, self.TrajInfoCls, self.null_action, self.rngs, max_decorrelation_steps
        )
        step = self.step
        step.observation[:], step.action[:], step.reward[:] = inputs
        step.done[:] = False
        return None, traj_infos

    def collect_batch(
        self, agent_inputs: Any, traj_infos: list[TrajInfo], itr: int
    ) -> tuple[Any, list[TrajInfo], list[TrajInfo]]:
        env_buf, step = self.samples_np.env, self.step
        # Wait-reset: the envs done earlier in this batch.
        waiting = None if self.mid_batch_reset else np.zeros(len(self.envs), bool)
        completed = []
        for t in range(self.batch_T):
            env_buf.observation[t] = step.observation
            self.act_ready.acquire()
            env_info = None if env_buf.env_info is None else env_buf.env_info[t]
            out = EnvStep(step.observation, step.reward, step.done, env_info)
            completed += step_envs(
                self.envs,
                step.observation,
                step.action,
                None,
                traj_infos,
                self.TrajInfoCls,
                out,
                waiting,
            )
            env_buf.reward[t], env_buf.done[t] = step.reward, step.done
            if waiting is not None and t == self.batch_T - 1:  # the server sees them fresh
                for b in np.flatnonzero(waiting):
                    step.observation[b] = self.envs[b].reset()
            self.obs_ready.release()
        return agent_inputs, traj_infos, completed


class GpuWaitResetCollector(GpuResetCollector):
    """A done env waits, recording blank steps with done=True, until the batch ends; then
    it resets (for recurrent agents trained without ``mid_batch_reset``)."""

    mid_batch_reset = False


class GpuEvalCollector:
    """Worker side of evaluation: step with the server's actions until it says stop."""

    def __init__(
        self,
        envs: list[Env],
        agent: SamplerAgent | None,
        TrajInfoCls: type[TrajInfo],
        max_T: int,
        *,
        step: AttrDict,
        act_ready: Gate,
        obs_ready: Gate,
    ):
        self.envs, self.TrajInfoCls, self.max_T = envs, TrajInfoCls, max_T
        self.step, self.act_ready, self.obs_ready = step, act_ready, obs_ready

    def collect_evaluation(
        self, itr: int, stop: Any = None, report: Callable[[TrajInfo], object] | None = None
    ) -> list[TrajInfo]:
        step = self.step
        traj_infos = [self.TrajInfoCls() for _ in self.envs]
        for b, env in enumerate(self.envs):
            step.observation[b], step.done[b] = env.reset(), True
        self.obs_ready.release()
        out = EnvStep(step.observation, step.reward, step.done, None)
        for _ in range(self.max_T):
            self.act_ready.acquire()
            if stop is not None and stop.value:
                break
            ended = step_envs(
                self.envs, step.observation, step.action, None, traj_infos, self.TrajInfoCls, out
            )
            if report is not None:
                for info in ended:
                    report(info)
            self.obs_ready.release()
        return []


class GpuSampler(ParallelSamplerBase):
    """Workers step environments; this process acts for all of them in one batch.

    The agent stays in this process (on its device, ``agent.to_device`` is the caller's
    business); its ``step`` takes and returns CPU tensors.
    """

    agent_in_workers = False
    report_evaluation = True  # (it stops the evaluation once enough episodes are in)

    def __init__(
        self,
        *args: Any,
        CollectorCls: type[BaseCollector] = GpuResetCollector,
        eval_CollectorCls: type[GpuEvalCollector] = GpuEvalCollector,
        **kwargs: Any,
    ):
        super().__init__(
            *args, CollectorCls=CollectorCls, eval_CollectorCls=eval_CollectorCls, **kwargs
        )

    def _initialize_agent(
        self, agent: SamplerAgent, spaces: EnvSpaces, global_B: int, env_ranks: Iterable[int]
    ) -> None:
        agent.initialize(spaces, share_memory=False, global_B=global_B, env_ranks=list(env_ranks))

    def _launch_workers(
        self, affinity: dict[str, Any] | None, seed: int | None, rank: int, examples: dict[str, Any]
    ) -> None:
        super()._launch_workers(affinity, seed, rank, examples)
        # The workers wrote their decorrelated start into the step buffer.
        self.prev_action = self.step.action.copy()
        self.prev_reward = self.step.reward.copy()
        self.agent.reset()

    def _prepare_workers(
        self,
        ctx: BaseContext,
        examples: dict[str, Any],
        splits: list[np.ndarray],
        eval_splits: list[np.ndarray],
    ) -> None:
        self.step = _step_buffer(examples, self.batch_spec.B)
        self.eval_step = _step_buffer(examples, max(self.eval_n_envs, 1))
        self.null_action = np.asarray(examples["action"])  # the example action is the null one
        self.ctx = ctx
        self.gates: list[Gate] = []  # this process's ends of the workers' gates

    def _worker_extras(self, rank: int) -> dict[str, Any]:
        envs, eval_envs = self.splits[rank], self.eval_splits[rank]
        ours, theirs = self.ctx.Pipe()
        self.gates.append(Gate(ours))
        self._child_ends.append(theirs)
        gate = Gate(theirs)  # (the worker acquires act_ready and releases obs_ready on it)
        semaphores = dict(act_ready=gate, obs_ready=gate)
        eval_step = None
        if len(eval_envs):
            eval_step = _slice(self.eval_step, int(eval_envs[0]), int(eval_envs[-1]) + 1)
        return dict(
            collector_kwargs=dict(
                step=_slice(self.step, int(envs[0]), int(envs[-1]) + 1), **semaphores
            ),
            eval_collector_kwargs=dict(step=eval_step, **semaphores),
        )

    def _worker_started(self, rank: int, process: BaseProcess) -> None:
        self.gates[rank].watch(process.sentinel)  # (a wait on it ends when the worker does)

    def shutdown(self, kill: Iterable[int] = ()) -> None:
        super().shutdown(kill)
        for gate in getattr(self, "gates", []):
            gate.conn.close()
        self.gates = []

    # ------------------------------------------------------------------ the action server

    def _go(self, workers: list[int]) -> None:
        """Release ``act_ready`` for ``workers``."""
        for w in workers:
            try:
                self.gates[w].release()
                continue
            except OSError:  # (its end is closed)
                pass
            self._failed(w)

    def _wait_obs(self, workers: list[int]) -> None:
        for w in workers:
            try:
                stepped = self.gates[w].acquire(timeout=self.worker_timeout)
            except (EOFError, OSError):  # (its end is closed)
                stepped = False
            if not stepped:
                self._failed(w)

    def _act(self, step: AttrDict, envs: slice, t: int | None) -> None:
        """Select the actions of environments ``envs`` (recording them as step ``t``)."""
        inputs = torchify_buffer(
            (step.observation[envs], self.prev_action[envs], self.prev_reward[envs])
        )
        with torch.no_grad():
            action, agent_info = self.agent.step(*inputs)
        action, agent_info = numpify_buffer(action), numpify_buffer(agent_info)
        step.action[envs] = action
        if t is not None:
            agent_buf, env_buf = self.samples_np.agent, self.samples_np.env
            agent_buf.prev_action[t, envs] = self.prev_action[envs]
            env_buf.prev_reward[t, envs] = self.prev_reward[envs]
            agent_buf.action[t, envs] = action
            if agent_info is not None:
                agent_buf.agent_info[t, envs] = agent_info

    def _observe(self, step: AttrDict, envs: slice) -> None:
        """Take in the step results of ``envs``: next previous action and reward, and the
        agent's reset for environments that were done (and reset by their worker)."""
        done = step.done[envs]
        update_prev(
            self.prev_action[envs],
            self.prev_reward[envs],
            step.action[envs],
            step.reward[envs],
            done,
            self.null_action,
        )
        for b in np.flatnonzero(done):
            self.agent.reset_one(idx=envs.start + int(b))

    def _serve(self, step: AttrDict, workers: list[int], n_steps: int, record: bool) -> None:
        """Act ``n_steps`` times for all the environments in ``step`` at once."""
        every = slice(0, len(step.done))
        for t in range(n_steps):
            self._act(step, every, t if record else None)
            self._go(workers)
            self._wait_obs(workers)
            self._observe(step, every)

    def _refresh_agent(self) -> None:
        """(The agent acts here, in this process: nothing to share.)"""

    def _start_collecting(self, itr: int, db_idx: int) -> None:
        self._refresh_agent()
        self.agent.sample_mode(itr)
        self.samples_np = self.buffers[db_idx]
        self._command(COLLECT, itr, db_idx)

    def _collect(self, itr: int, db_idx: int) -> list[TrajInfo]:
        self._start_collecting(itr, db_idx)
        workers = list(range(len(self.workers)))
        self._serve(self.step, workers, self.batch_spec.T, record=True)
        infos = self._gather()
        self._bootstrap_value()
        return infos

    def _bootstrap_value(self) -> None:
        if "bootstrap_value" in self.samples_np.agent:
            inputs = torchify_buffer((self.step.observation, self.prev_action, self.prev_reward))
            with torch.no_grad():
                value = self.agent.value(*inputs)
            self.samples_np.agent.bootstrap_value[:] = numpify_buffer(value)

    def evaluate_agent(self, itr: int) -> list[TrajInfo]:
        if self.eval_n_envs == 0:
            raise RuntimeError("this sampler was made with eval_n_envs=0")
        workers = [w for w, envs in enumerate(self.eval_splits) if len(envs)]
        self._refresh_agent()
        self.agent.eval_mode(itr)  # (first: the reset is then of the evaluation state)
        self.agent.reset()
        self._command(EVALUATE, itr)
        self._wait_obs(workers)  # first observations in
        n = self.eval_n_envs
        saved = self.prev_action, self.prev_reward
        self.prev_action = np.stack([self.null_action] * n)
        self.prev_reward = np.zeros(n, np.float32)
        infos: list[TrajInfo] = []
        answered: set[int] = set()
        step = _slice(self.eval_step, 0, n)
        limit = self.eval_max_trajectories
        served = 0
        try:
            while served < self.eval_max_T:
                self._serve(step, workers, 1, record=False)
                served += 1
                # The step's episodes, worker by worker (a worker sends them before its
                # obs_ready): the same order in every run.
                for w in range(len(self.workers)):
                    if w not in answered and self._receive(w, infos):
                        answered.add(w)
                if limit is not None and len(infos) >= limit:
                    break
        finally:
            if self.workers:  # (not ended by a failure)
                if served < self.eval_max_T:  # workers wait for one more action: say stop
                    self.stop_flag[0] = 1
                    self._go(workers)
                infos += self._gather(answered=answered)
            self.prev_action, self.prev_reward = saved
            self.agent.reset()
        return infos[:limit]


class AlternatingSampler(GpuSampler):
    """The action server with the workers in two groups: while one group steps its
    environments, the main process selects the other group's actions, so neither the
    agent nor the environments wait for each other.  Needs an even number of workers; a
    recurrent agent must keep one state per group (it sees the two halves alternately).
    """

    overlap_groups = True

    def _prepare_workers(
        self,
        ctx: BaseContext,
        examples: dict[str, Any],
        splits: list[np.ndarray],
        eval_splits: list[np.ndarray],
    ) -> None:
        if len(splits) < 2 or len(splits) % 2:
            raise ValueError(
                f"{type(self).__name__} needs an even number of workers, got {len(splits)}"
            )
        if getattr(self.agent, "recurrent", False) and not getattr(self.agent, "alternating", 0):
            raise ValueError(
                f"{type(self).__name__} shows the agent its two groups of environments in "
                f"turn, so a recurrent agent must keep a state per group: use an Alternating* "
                f"agent (e.g. AlternatingAtariLstmAgent), got {type(self.agent).__name__}"
            )
        super()._prepare_workers(ctx, examples, splits, eval_splits)
        half = len(splits) // 2
        middle = int(splits[half][0])
        self.groups = [
            (list(range(half)), slice(0, middle)),
            (list(range(half, len(splits))), slice(middle, self.batch_spec.B)),
        ]

    def _collect(self, itr: int, db_idx: int) -> list[TrajInfo]:
        self._start_collecting(itr, db_idx)
        step, (first, second) = self.step, self.groups
        for t in range(self.batch_spec.T):
            if self.overlap_groups:
                self._act(step, first[1], t)  # (the second group may still be stepping)
                self._release(first)
                if t > 0:
                    self._observe_group(second)
                self._act(step, second[1], t)  # while the first group steps
                self._release(second)
                self._observe_group(first)
            else:  # only one group steps at a time (e.g. two workers sharing a core)
                self._act(step, first[1], t)
                if t > 0:
                    self._observe_group(second)
                self._release(first)
                self._act(step, second[1], t)  # while the first group steps
                self._observe_group(first)
                self._release(second)
        self._observe_group(second)
        infos = self._gather()
        self._bootstrap_value()
        return infos

    def _release(self, group: tuple[list[int], slice]) -> None:
        self._go(group[0])

    def _observe_group(self, group: tuple[list[int], slice]) -> None:
        self._wait_obs(group[0])
        self._observe(self.step, group[1])


class NoOverlapAlternatingSampler(AlternatingSampler):
    """Alternating, but one group's environments step only once the other group's are
    done: the main process still selects actions while a group steps, and two workers
    pinned to the same core never compete for it."""

    overlap_groups = False
