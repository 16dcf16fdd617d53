"""A sampler for one vectorised environment (a ``BatchEnv``, or a gymnasium ``VectorEnv``
it adapts: ``_batch_env``): all ``batch_B`` envs advance in one call per step, and no Python
runs per env or per finished episode.  The README ("BatchedSampler and BatchEnv") has the
details.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, overload

import numpy as np
import torch

from rl_arrays import (
    AgentSamples,
    AgentSamplesBsv,
    EnvSamples,
    EnvSpaces,
    Samples,
    is_namedarraytuple,
    namedarraytuple,
    normalize_device,
    numpify_buffer,
    torchify_buffer,
)

from ._agent import SamplerAgent
from ._base import BaseSampler
from ._batch_env import (
    CRITIC_OBSERVATION,
    TRAJ_DONE,
    ActorCriticObservation,
    BatchEnv,
    GymVectorAdapter,
    as_batch_env,
    buffer_to_cpu,
    env_extra,
    env_reset,
    env_step,
    observation_space_of,
    traj_info_fields_of,
)
from ._spaces import Space, stack_values
from ._traj_info import TrajInfo

# BatchEnv and its extras keys live in _batch_env; they are exported from here as well, where
# the package's __init__ and the env modules (_torch_envs, _rsl_rl, _ale_vector) import them.
__all__ = [
    "CRITIC_OBSERVATION",
    "TRAJ_DONE",
    "ActorCriticObservation",
    "BatchEnv",
    "BatchTrajInfos",
    "BatchedSampler",
]

# The env_info of every step: only the time-limit flag (so algorithms can bootstrap).
EnvInfo = namedarraytuple("EnvInfo", ["timeout"])


def _map2(func: Callable[[Any, Any], Any], a: Any, b: Any) -> Any:
    """``func`` on matching leaves of two buffers of the same structure."""
    if a is None:
        return None
    if is_namedarraytuple(a) or isinstance(a, tuple):
        return type(a)(*(_map2(func, x, y) for x, y in zip(a, b, strict=True)))
    return func(a, b)


def _where(mask: torch.Tensor, a: Any, b: Any) -> Any:
    """``a`` where ``mask [B]`` is true, else ``b`` (leaves broadcast over trailing dims)."""

    def leaf(x: Any, y: Any) -> torch.Tensor:
        y = torch.as_tensor(y, device=x.device)
        return torch.where(mask.view(-1, *([1] * (x.dim() - 1))), x, y)

    return _map2(leaf, a, b)


def _torch_zeros(example: Any, lead: tuple[int, ...], device: torch.device) -> Any:
    """A zero torch buffer of ``example``'s structure and dtypes, leading dims ``lead``."""
    if example is None:
        return None
    if is_namedarraytuple(example):
        return type(example)(*(_torch_zeros(x, lead, device) for x in example))
    example = np.asarray(example)
    dtype = torch.from_numpy(np.zeros((), example.dtype)).dtype
    return torch.zeros(lead + example.shape, dtype=dtype, device=device)


class BatchedSampler(BaseSampler):
    """Collects ``[batch_T, batch_B]`` batches from one vectorised env (see the module).

    Episode boundaries follow ``CpuResetCollector``: a done env starts its next episode at
    the next step, with the null previous action, previous reward 0 and
    ``agent.reset_one(idx=b)``.  Trajectory infos are accumulated in tensors (length,
    return, non-zero rewards, discounted return, and the env's ``traj_info_fields``), so
    ``TrajInfoCls`` may not override ``step`` or ``terminate`` (``terminate`` would get no
    final observation); they end at the env's ``TRAJ_DONE`` if it gives one, else at done.

    ``max_decorrelation_steps``: all envs take ``n`` random-action steps together at the
    start (``n`` drawn from the seeded rng in ``[0, max]``); they drift apart only through
    their episodes' different lengths.
    """

    def __init__(
        self,
        make_env: Callable[[int], Any],
        batch_T: int,
        batch_B: int,
        max_decorrelation_steps: int = 0,
        TrajInfoCls: type[TrajInfo] = TrajInfo,
    ):
        super().__init__(
            make_env,
            None,
            batch_T,
            batch_B,
            CollectorCls=None,
            max_decorrelation_steps=max_decorrelation_steps,
            TrajInfoCls=TrajInfoCls,
        )
        for name in ("step", "terminate"):
            if getattr(TrajInfoCls, name) is not getattr(TrajInfo, name):
                raise TypeError(
                    f"BatchedSampler: TrajInfoCls={TrajInfoCls.__name__} overrides {name}(); "
                    "this sampler accumulates episode statistics in tensors and supports only "
                    "TrajInfo's fields"
                )
        self.make_env = make_env

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
        """Make the env, initialize the agent, allocate the batch on the env's device;
        return one example of every field (to size replay buffers)."""
        B = self.batch_spec.B
        for key, value in (traj_info_kwargs or {}).items():
            setattr(self.TrajInfoCls, "_" + key, value)
        self.env = as_batch_env(self.make_env(B), B)
        self.device = normalize_device(self.env.device)
        self._observation_space = observation_space_of(self.env)
        self._sum_fields = traj_info_fields_of(self.env)
        agent.initialize(
            self.env_spaces,
            share_memory=False,
            global_B=B * world_size,
            env_ranks=list(range(rank * B, (rank + 1) * B)),
        )
        self.agent = agent
        if hasattr(agent, "output_device"):  # actions and values stay on the env's device
            agent.output_device = self.device
        self._reset_done = getattr(agent, "reset_done", None)  # (else reset_one, one by one)
        examples = self._batch_examples(agent)
        self._allocate(examples, bootstrap_value)
        env_seeds = self._env_seeds(seed, rank, B)
        if isinstance(self.env, GymVectorAdapter):
            self.env.seed(env_seeds)
        else:
            self.env.seed(int(self._seeds(seed, rank).generate_state(1)[0]))
        self.action_space.seed(env_seeds[0])
        self.null_action = torchify_buffer(self.action_space.null_value())
        self._start(np.random.default_rng(env_seeds[0]))
        return examples

    @property
    def action_space(self) -> Space:
        return self.env.action_space

    @property
    def env_spaces(self) -> EnvSpaces:
        """The env's per-env spaces; with privileged critic observations ``observation`` is
        the ``Composite`` of the actor's and the critic's (see ``BatchEnv``)."""
        return EnvSpaces(observation=self._observation_space, action=self.env.action_space)

    def _check_critic_shape(self, observation: Any) -> None:
        """A critic observation must have its space's shape (checked once, on the examples)."""
        space = getattr(self.env, "critic_observation_space", None)
        if space is None:
            return
        shape = tuple(observation.critic.shape[1:])
        if shape != tuple(space.shape):
            raise ValueError(
                f"{type(self.env).__name__}: the critic observation has shape {shape} per env, "
                f"but critic_observation_space.shape is {tuple(space.shape)}"
            )

    def _batch_examples(self, agent: SamplerAgent) -> dict[str, Any]:
        """One real step of a one-env copy and of ``agent``: every field's shape and dtype
        (a copy, so the run's env keeps the stream its seeds give it)."""
        env = as_batch_env(self.make_env(1), 1)
        try:
            env_reset(env)
            null = self.action_space.null_value()
            action = _map2(lambda x, _: torch.as_tensor(x, device=env.device)[None], null, null)
            observation, reward, _, _, extras = env_step(env, action)
            self._check_critic_shape(observation)
            for name in self._sum_fields:  # (refused now, not at the first batch)
                env_extra(env, extras, name)
            agent.reset()
            with torch.no_grad():
                agent_step = agent.step(observation, action, reward)
        finally:
            env.close()

        def first(buf: Any) -> Any:  # env 0 of the one-env batch, as numpy
            return None if buf is None else numpify_buffer(buffer_to_cpu(buf[0]))

        agent_info = agent_step.agent_info
        if isinstance(agent_info, tuple) and not agent_info:
            agent_info = None
        return dict(
            observation=first(observation),
            reward=np.float32(first(reward)),
            done=np.bool_(False),
            env_info=EnvInfo(np.bool_(False)),
            action=np.asarray(null),
            agent_info=first(agent_info),
        )

    def _allocate(self, examples: dict[str, Any], bootstrap_value: bool) -> None:
        T, B = self.batch_spec

        def zeros(example: Any, lead: tuple[int, ...]) -> Any:
            return _torch_zeros(example, lead, self.device)

        agent = dict(
            action=zeros(examples["action"], (T, B)),
            prev_action=zeros(examples["action"], (T, B)),
            agent_info=zeros(examples["agent_info"], (T, B)),
        )
        if bootstrap_value:
            agent_samples = AgentSamplesBsv(**agent, bootstrap_value=zeros(np.float32(0), (B,)))
        else:
            agent_samples = AgentSamples(**agent)
        env = EnvSamples(
            observation=zeros(examples["observation"], (T, B)),
            reward=zeros(examples["reward"], (T, B)),
            prev_reward=zeros(examples["reward"], (T, B)),
            done=zeros(examples["done"], (T, B)),
            env_info=zeros(examples["env_info"], (T, B)),
        )
        self.samples_pyt = Samples(agent=agent_samples, env=env)
        # Per-trajectory running statistics (length, return, nonzero rewards, discounted
        # return, then the env's traj_info_fields).
        width = 4 + len(self._sum_fields)
        self._stats = torch.zeros(B, width, dtype=torch.float64, device=self.device)
        self._discount = torch.ones(B, dtype=torch.float64, device=self.device)

    def _start(self, rng: np.random.Generator) -> None:
        """Reset every env, then take the decorrelation steps (their episodes not reported)."""
        B = self.batch_spec.B
        self.observation = env_reset(self.env)
        self._null_actions = _map2(
            lambda x, _: x.to(self.device).expand(B, *x.shape).contiguous(),
            self.null_action,
            self.null_action,
        )
        self.prev_action = _map2(lambda x, _: x.clone(), self._null_actions, self._null_actions)
        self.prev_reward = torch.zeros(B, device=self.device)
        n = int(rng.integers(self.max_decorrelation_steps + 1))
        for _ in range(n):
            action = torchify_buffer(stack_values([self.action_space.sample() for _ in range(B)]))
            *_, traj_done = self._step(self._on_device(action))
            self._end_trajectories(traj_done)
        self.agent.reset()

    def _on_device(self, action: Any) -> Any:
        """``action`` on the env's device (an agent that honours ``output_device`` puts it
        there already: then nothing is called)."""
        return _map2(
            lambda x, _: x if x.device == self.device else x.to(self.device), action, action
        )

    def _step(self, action: Any) -> tuple[torch.Tensor, ...]:
        """Step every env with ``action``; update the agent inputs and trajectory statistics.
        Returns ``(reward, done, timeout, traj_done)``."""
        observation, reward, terminated, truncated, extras = env_step(self.env, action)
        reward = reward.to(torch.float32)
        done, timeout = terminated | truncated, truncated & ~terminated
        traj_done = done
        if isinstance(extras, dict) and TRAJ_DONE in extras:
            traj_done = extras[TRAJ_DONE] & done  # (a trajectory ends only with an episode)
        self._stats[:, 0] += 1
        self._stats[:, 1] += reward
        self._stats[:, 2] += reward != 0
        self._stats[:, 3] += self._discount * reward
        for column, name in enumerate(self._sum_fields, start=4):
            self._stats[:, column] += env_extra(self.env, extras, name)
        self._discount *= self.TrajInfoCls._discount
        self.observation = observation
        self.prev_action = _where(done, self._null_actions, action)
        self.prev_reward = reward.masked_fill(done, 0)
        return reward, done, timeout, traj_done

    def _end_trajectories(self, traj_done: torch.Tensor) -> None:
        self._stats.masked_fill_(traj_done[:, None], 0)  # (masked fills: no host sync)
        self._discount.masked_fill_(traj_done, 1)

    @torch.no_grad()  # the batch must hold no autograd history (an agent's outputs may)
    def obtain_samples(self, itr: int) -> tuple[Any, BatchTrajInfos]:
        """One batch: ``(samples [T, B] on the env's device, the trajectory infos of the
        episodes completed in it)``, the infos read from the device only when asked."""
        T, B = self.batch_spec
        agent_buf, env_buf = self.samples_pyt.agent, self.samples_pyt.env
        # Each step's statistics at its end (read where a trajectory ended) and those ends;
        # new tensors per batch, as the trajectory infos handed out keep them.
        stats_at = torch.empty(T, B, self._stats.shape[1], dtype=torch.float64, device=self.device)
        traj_done_at = torch.empty(T, B, dtype=torch.bool, device=self.device)
        self.agent.sample_mode(itr)
        for t in range(T):
            env_buf.observation[t] = self.observation
            agent_buf.prev_action[t] = self.prev_action
            env_buf.prev_reward[t] = self.prev_reward
            action, agent_info = self.agent.step(
                self.observation, self.prev_action, self.prev_reward
            )
            action = self._on_device(action)
            agent_buf.action[t] = action
            if agent_info is not None and agent_buf.agent_info is not None:
                agent_buf.agent_info[t] = agent_info
            reward, done, timeout, traj_done = self._step(action)
            env_buf.reward[t], env_buf.done[t] = reward, done
            env_buf.env_info.timeout[t] = timeout
            stats_at[t], traj_done_at[t] = self._stats, traj_done
            self._end_trajectories(traj_done)
            if self._reset_done is not None:  # on the device, no host sync
                self._reset_done(done)
            else:
                for b in torch.nonzero(done).flatten().tolist():  # one host sync per step
                    self.agent.reset_one(idx=b)
        if "bootstrap_value" in agent_buf:
            value = self.agent.value(self.observation, self.prev_action, self.prev_reward)
            agent_buf.bootstrap_value[:] = value
        infos = BatchTrajInfos(traj_done_at, stats_at, self.TrajInfoCls, self._sum_fields)
        return self.samples_pyt, infos

    def evaluate_agent(self, itr: int) -> list[TrajInfo]:
        raise NotImplementedError(
            "BatchedSampler does not evaluate; evaluate with a SerialSampler (eval_n_envs > 0) "
            "or run another BatchedSampler with the agent in eval mode"
        )

    def shutdown(self) -> None:
        env = getattr(self, "env", None)
        if env is not None:
            env.close()


class BatchTrajInfos(Sequence[TrajInfo]):
    """The trajectory infos of the episodes that ended in one batch, in (t, b) order.

    Their statistics stay on the device until asked for: ``len()`` reads the positions of
    the episodes' ends once, and an index or a slice builds only the infos it selects (one
    more read), so a runner that keeps the last 100 episodes (``infos[-100:]``) costs the
    same at 64 environments as at 65,536.  Iterating builds them all.  ``done [T, B]``:
    where trajectories ended; ``stats_at [T, B, 4 + len(fields)]``: their statistics there
    (length, return, non-zero rewards, discounted return, then ``fields``, by name).
    """

    def __init__(
        self,
        done: torch.Tensor,
        stats_at: torch.Tensor,
        TrajInfoCls: type[TrajInfo],
        fields: tuple[str, ...] = (),
    ):
        self._done, self._stats_at, self._TrajInfoCls = done, stats_at, TrajInfoCls
        self._fields = fields
        self._ends: torch.Tensor | None = None  # flat (t, b) positions of the episodes' ends

    def _positions(self) -> torch.Tensor:
        if self._ends is None:
            self._ends = torch.nonzero(self._done.flatten()).squeeze(1)
        return self._ends

    def __len__(self) -> int:
        return int(self._positions().shape[0])

    @overload
    def __getitem__(self, index: int) -> TrajInfo: ...

    @overload
    def __getitem__(self, index: slice) -> list[TrajInfo]: ...

    def __getitem__(self, index: int | slice) -> TrajInfo | list[TrajInfo]:
        if isinstance(index, slice):
            chosen = range(len(self))[index]
            ends = self._positions()
            if chosen.step == 1:
                ends = ends[chosen.start : chosen.stop]
            else:
                ends = ends[torch.as_tensor(chosen, dtype=torch.int64, device=ends.device)]
            return [self._info(row) for row in self._stats_at.flatten(0, 1)[ends].tolist()]
        position = range(len(self))[index]  # (an IndexError out of range, as a list gives)
        return self[position : position + 1][0]

    def __iter__(self) -> Iterator[TrajInfo]:
        return iter(self[:])

    def _info(self, row: list[float]) -> TrajInfo:
        length, ret, nonzero, discounted, *sums = row
        info = self._TrajInfoCls()
        info.Length, info.Return = int(length), ret
        info.NonzeroRewards, info.DiscountedReturn = int(nonzero), discounted
        for name, value in zip(self._fields, sums, strict=True):
            info[name] = value
        return info.terminate(None)
