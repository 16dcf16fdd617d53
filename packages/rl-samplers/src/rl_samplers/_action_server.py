"""The action server: a part of ``ParallelSampler(action_server=True)``. Its workers only
step environments (``_gpu``'s collectors); the main process selects the actions of all
``batch_B`` environments in one agent call per step, on the agent's device (a GPU, or the
CPU).

With ``alternating``, the workers form two groups: while one group steps its environments,
the main process selects the other group's actions, so neither the agent nor the
environments wait for each other (``"overlap"``); ``"no_overlap"`` steps one group at a time,
for two workers pinned to the same core.
"""

from __future__ import annotations

from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch

from rl_arrays import AttrDict, buffer_from_example, numpify_buffer, torchify_buffer

from ._collectors import update_prev
from ._traj_info import TrajInfo
from ._worker import COLLECT, EVALUATE, Gate

if TYPE_CHECKING:
    from ._parallel import ParallelSampler

__all__ = ["ActionServer", "Alternating"]

# Whether two groups of workers alternate, and whether their stepping overlaps.
Alternating = Literal["overlap", "no_overlap"] | None
Group = tuple[list[int], slice]  # (its workers, its environments)


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


class ActionServer:
    """Acts for ``sampler``'s workers, from the sampler's process. The agent stays in this
    process (on its device: ``agent.to_device`` is the caller's business); its ``step``
    takes and returns CPU tensors."""

    def __init__(self, sampler: ParallelSampler, alternating: Alternating = None):
        if alternating not in ("overlap", "no_overlap", None):
            raise ValueError(
                f"alternating must be 'overlap', 'no_overlap' or None, got {alternating!r}"
            )
        self.sampler, self.alternating = sampler, alternating
        self.gates: list[Gate] = []  # this process's ends of the workers' gates

    # ------------------------------------------------------------------ starting the workers

    def prepare(self, ctx: BaseContext, examples: dict[str, Any]) -> None:
        """Before the workers start: the shared step buffers, and the groups."""
        sampler = self.sampler
        if self.alternating:
            self._check_alternating(len(sampler.splits))
            half = len(sampler.splits) // 2
            middle = int(sampler.splits[half][0])
            self.groups: list[Group] = [
                (list(range(half)), slice(0, middle)),
                (list(range(half, len(sampler.splits))), slice(middle, sampler.batch_spec.B)),
            ]
        self.step = _step_buffer(examples, sampler.batch_spec.B)
        self.eval_step = _step_buffer(examples, max(sampler.eval_n_envs, 1))
        self.null_action = np.asarray(examples["action"])  # the example action is the null one
        self.ctx = ctx

    def _check_alternating(self, n_workers: int) -> None:
        name = type(self.sampler).__name__
        if n_workers < 2 or n_workers % 2:
            raise ValueError(f"{name} needs an even number of workers, got {n_workers}")
        agent = self.sampler.agent
        if getattr(agent, "recurrent", False) and not getattr(agent, "alternating", 0):
            raise ValueError(
                f"{name} shows the agent its two groups of environments in turn, so a "
                "recurrent agent must keep a state per group: use an Alternating* agent "
                f"(e.g. AlternatingAtariLstmAgent), got {type(agent).__name__}"
            )

    def worker_extras(self, rank: int) -> dict[str, Any]:
        """Worker ``rank``'s slices of the step buffers and its gate."""
        sampler = self.sampler
        envs, eval_envs = sampler.splits[rank], sampler.eval_splits[rank]
        ours, theirs = self.ctx.Pipe()
        self.gates.append(Gate(ours))
        sampler.child_ends.append(theirs)
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

    def worker_started(self, rank: int, process: BaseProcess) -> None:
        self.gates[rank].watch(process.sentinel)  # (a wait on it ends when the worker does)

    def workers_ready(self) -> None:
        """The workers wrote their decorrelated start into the step buffer."""
        self.prev_action = self.step.action.copy()
        self.prev_reward = self.step.reward.copy()
        self.sampler.agent.reset()

    def close(self) -> None:
        for gate in self.gates:
            gate.conn.close()
        self.gates = []

    # ------------------------------------------------------------------ one step

    def _go(self, workers: list[int]) -> None:
        """Release ``act_ready`` for ``workers``."""
        for w in workers:
            try:
                self.gates[w].release()
                continue
            except OSError:  # (its end is closed)
                pass
            self.sampler.failed(w)

    def _wait_obs(self, workers: list[int]) -> None:
        for w in workers:
            try:
                stepped = self.gates[w].acquire(timeout=self.sampler.worker_timeout)
            except (EOFError, OSError):  # (its end is closed)
                stepped = False
            if not stepped:
                self.sampler.failed(w)

    def _act(self, step: AttrDict, envs: slice, t: int | None) -> None:
        """Select the actions of environments ``envs`` (recording them as step ``t``)."""
        inputs = torchify_buffer(
            (step.observation[envs], self.prev_action[envs], self.prev_reward[envs])
        )
        with torch.no_grad():
            action, agent_info = self.sampler.agent.step(*inputs)
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
            self.sampler.agent.reset_one(idx=envs.start + int(b))

    def _serve(self, step: AttrDict, workers: list[int], n_steps: int, record: bool) -> None:
        """Act ``n_steps`` times for all the environments in ``step`` at once."""
        every = slice(0, len(step.done))
        for t in range(n_steps):
            self._act(step, every, t if record else None)
            self._go(workers)
            self._wait_obs(workers)
            self._observe(step, every)

    # ------------------------------------------------------------------ a batch

    def collect(self, itr: int, db_idx: int) -> list[TrajInfo]:
        """Fill the sampler's buffer ``db_idx``; return the trajectory infos completed."""
        sampler = self.sampler
        sampler.refresh_agent()
        sampler.agent.sample_mode(itr)
        self.samples_np = sampler.buffers[db_idx]
        sampler.command(COLLECT, itr, db_idx)
        if self.alternating:
            self._collect_alternating()
        else:
            self._serve(self.step, list(range(len(sampler.workers))), sampler.batch_spec.T, True)
        infos = sampler.gather()
        self._bootstrap_value()
        return infos

    def _collect_alternating(self) -> None:
        step, (first, second) = self.step, self.groups
        for t in range(self.sampler.batch_spec.T):
            if self.alternating == "overlap":
                self._act(step, first[1], t)  # (the second group may still be stepping)
                self._go(first[0])
                if t > 0:
                    self._observe_group(second)
                self._act(step, second[1], t)  # while the first group steps
                self._go(second[0])
                self._observe_group(first)
            else:  # only one group steps at a time (e.g. two workers sharing a core)
                self._act(step, first[1], t)
                if t > 0:
                    self._observe_group(second)
                self._go(first[0])
                self._act(step, second[1], t)  # while the first group steps
                self._observe_group(first)
                self._go(second[0])
        self._observe_group(second)

    def _observe_group(self, group: Group) -> None:
        self._wait_obs(group[0])
        self._observe(self.step, group[1])

    def _bootstrap_value(self) -> None:
        if "bootstrap_value" in self.samples_np.agent:
            inputs = torchify_buffer((self.step.observation, self.prev_action, self.prev_reward))
            with torch.no_grad():
                value = self.sampler.agent.value(*inputs)
            self.samples_np.agent.bootstrap_value[:] = numpify_buffer(value)

    def evaluate(self, itr: int) -> list[TrajInfo]:
        """Serve the workers' evaluation environments until enough episodes are in or the
        steps run out."""
        sampler, agent = self.sampler, self.sampler.agent
        workers = [w for w, envs in enumerate(sampler.eval_splits) if len(envs)]
        sampler.refresh_agent()
        agent.eval_mode(itr)  # (first: the reset is then of the evaluation state)
        agent.reset()
        sampler.command(EVALUATE, itr)
        self._wait_obs(workers)  # first observations in
        n = sampler.eval_n_envs
        saved = self.prev_action, self.prev_reward
        self.prev_action = np.stack([self.null_action] * n)
        self.prev_reward = np.zeros(n, np.float32)
        infos: list[TrajInfo] = []
        answered: set[int] = set()
        step = _slice(self.eval_step, 0, n)
        limit = sampler.eval_max_trajectories
        served = 0
        try:
            while served < sampler.eval_max_T:
                self._serve(step, workers, 1, record=False)
                served += 1
                # The step's episodes, worker by worker (a worker sends them before its
                # obs_ready): the same order in every run.
                for w in range(len(sampler.workers)):
                    if w not in answered and sampler.receive(w, infos):
                        answered.add(w)
                if limit is not None and len(infos) >= limit:
                    break
        finally:
            if sampler.workers:  # (not ended by a failure)
                if served < sampler.eval_max_T:  # workers wait for one more action: say stop
                    sampler.stop_flag[0] = 1
                    self._go(workers)
                infos += sampler.gather(answered=answered)
            self.prev_action, self.prev_reward = saved
            agent.reset()
        return infos[:limit]
