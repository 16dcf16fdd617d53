"""A sampler for one vectorised environment: all ``batch_B`` envs advance in one call per
step, and no Python runs per env or per finished episode.

``make_env(num_envs)`` returns a gymnasium ``VectorEnv`` (numpy, batch on the CPU) whose
autoreset mode is ``SAME_STEP`` or ``DISABLED`` (``NEXT_STEP`` would record a fake
transition after each done, and is refused), or a ``BatchEnv`` (torch tensors, batch and
agent outputs on its device, nothing read on the host per step).  A ``BatchEnv`` may add a
privileged observation for the critic (``ActorCriticObservation``), per-step values its
trajectory infos sum (``traj_info_fields``, e.g. Atari's raw game score) and the ends of
trajectories that outlast an episode (``TRAJ_DONE``, e.g. Atari's episodic lives).  The
README ("BatchedSampler and BatchEnv") has the details.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, overload

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
from ._gym import GymSpaceWrapper
from ._spaces import Composite, Space, stack_values
from ._traj_info import TrajInfo

if TYPE_CHECKING:
    from gymnasium.vector import VectorEnv

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

ActorCriticObservation = namedarraytuple("ActorCriticObservation", ["actor", "critic"])
ActorCriticObservation.__doc__ = (
    "An observation in two parts: ``actor``, what the policy sees, and ``critic``, what the "
    "value function sees (privileged information, e.g. the full state), each [..., shape]."
)

CRITIC_OBSERVATION = "critic_observation"  # the extras key of the privileged observation
TRAJ_DONE = "traj_done"  # the extras key of where a trajectory record ends (else: every done)


class BatchEnv:
    """``num_envs`` environments stepped together as torch tensors on ``device``.

    Subclasses set ``num_envs``, ``device``, ``observation_space`` and ``action_space``
    (per-env spaces of ours) and implement ``reset() -> observation`` and ``step(action) ->
    (observation, reward, terminated, truncated)``, each ``[B, ...]`` on ``device``.  A done
    env resets inside ``step`` (the observation returned is its next episode's first);
    ``seed(seed)`` applies at the next ``reset``.  With ``critic_observation_space`` set,
    ``reset`` returns ``(observation, extras)`` and ``step`` a fifth element, ``extras``,
    with ``extras["critic_observation"]`` of the same state (README: privileged observations).

    Trajectory infos: ``step``'s extras may hold ``extras["traj_done"]`` (bool ``[B]``), where
    a trajectory record ends (a life loss is done, the game goes on: its record too); each
    name in ``traj_info_fields`` is a per-step value ``[B]`` in the extras that the records
    sum into a field of that name (``AleVectorEnv``: the raw game score, ``GameScore``).
    """

    num_envs: int
    device: torch.device
    observation_space: Space
    action_space: Space
    critic_observation_space: Space | None = None
    traj_info_fields: tuple[str, ...] = ()

    def reset(self) -> Any:
        raise NotImplementedError

    def step(self, action: Any) -> tuple[Any, ...]:
        raise NotImplementedError

    def seed(self, seed: int | None) -> None:
        raise NotImplementedError

    @property
    def spaces(self) -> EnvSpaces:
        """The per-env spaces; with a critic observation, ``observation`` is the
        ``Composite`` of the actor's and the critic's spaces (``ActorCriticObservation``)."""
        return EnvSpaces(observation=_observation_space(self), action=self.action_space)

    def close(self) -> None:
        """Release the environment's resources."""


def _observation_space(env: BatchEnv | _GymVectorAdapter) -> Space:
    """What the sampler records as the observation of ``env``: its observation space, or
    with a critic observation space the ``Composite`` of both (``ActorCriticObservation``)."""
    critic = getattr(env, "critic_observation_space", None)
    if critic is None:
        return env.observation_space
    return Composite([env.observation_space, critic], ActorCriticObservation)


def _with_critic(
    env: BatchEnv | _GymVectorAdapter, observation: Any, extras: object, call: str
) -> Any:
    """``observation``, or ``ActorCriticObservation(observation, critic observation)`` when
    ``env`` has a critic observation space (the privileged part taken from ``extras``)."""
    if getattr(env, "critic_observation_space", None) is None:
        return observation
    critic = extras.get(CRITIC_OBSERVATION) if isinstance(extras, dict) else None
    if critic is None:
        raise ValueError(
            f"{type(env).__name__} has a critic_observation_space, so {call} must return "
            f"extras (a dict) with the key {CRITIC_OBSERVATION!r}; got "
            f"{'extras ' + repr(sorted(extras)) if isinstance(extras, dict) else 'no extras'}"
        )
    return ActorCriticObservation(actor=observation, critic=critic)


def _env_reset(env: BatchEnv | _GymVectorAdapter) -> Any:
    """``env.reset()``'s observation (as the sampler records it; see ``BatchEnv``)."""
    result = env.reset()
    if isinstance(result, tuple) and not is_namedarraytuple(result):
        if len(result) != 2:
            raise ValueError(
                f"{type(env).__name__}.reset() returned a tuple of {len(result)}; expected the "
                "observation or (observation, extras)"
            )
        return _with_critic(env, result[0], result[1], "reset()")
    return _with_critic(env, result, None, "reset()")


def _env_step(
    env: BatchEnv | _GymVectorAdapter, action: Any
) -> tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor, Any]:
    """``env.step(action)`` as ``(observation, reward, terminated, truncated, extras)``, the
    observation as the sampler records it (see ``BatchEnv``), extras None if none."""
    result = env.step(action)
    if len(result) == 4:
        observation, reward, terminated, truncated = result
        extras = None
    elif len(result) == 5:
        observation, reward, terminated, truncated, extras = result
    else:
        raise ValueError(
            f"{type(env).__name__}.step() returned {len(result)} values; expected "
            "(observation, reward, terminated, truncated[, extras])"
        )
    observation = _with_critic(env, observation, extras, "step()")
    return observation, reward, terminated, truncated, extras


def _traj_info_fields(env: BatchEnv | _GymVectorAdapter) -> tuple[str, ...]:
    """``env.traj_info_fields``, checked: public names that ``TrajInfo`` does not have."""
    fields = tuple(getattr(env, "traj_info_fields", ()))
    reserved = set(TrajInfo())
    for name in fields:
        if (
            not (isinstance(name, str) and name.isidentifier())
            or name in reserved
            or name[0] == "_"
        ):
            raise ValueError(
                f"{type(env).__name__}.traj_info_fields: {name!r} is not a field name a "
                f"trajectory info can take (an identifier, not _-prefixed, none of "
                f"{', '.join(sorted(reserved))})"
            )
    return fields


def _extra(env: BatchEnv | _GymVectorAdapter, extras: Any, key: str) -> Any:
    """``extras[key]``, or an error that names the env and the key it did not return."""
    if not isinstance(extras, dict) or key not in extras:
        raise ValueError(
            f"{type(env).__name__} lists {key!r} in traj_info_fields, so step() must return "
            f"extras (a dict) with that key; got "
            f"{'extras ' + repr(sorted(extras)) if isinstance(extras, dict) else 'no extras'}"
        )
    return extras[key]


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


class _GymVectorAdapter:
    """A gymnasium ``VectorEnv`` seen as a ``BatchEnv`` on the CPU (torch views of numpy)."""

    device = torch.device("cpu")

    def __init__(self, env: VectorEnv):
        from gymnasium.vector import AutoresetMode

        mode = env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
        if mode not in (AutoresetMode.SAME_STEP, AutoresetMode.DISABLED):
            raise ValueError(
                f"BatchedSampler: make_env returned a VectorEnv with autoreset_mode={mode}; "
                "use AutoresetMode.SAME_STEP or DISABLED, e.g. gymnasium.make_vec(..., "
                'vector_kwargs={"autoreset_mode": gymnasium.vector.AutoresetMode.SAME_STEP})'
            )
        self.env, self.num_envs, self.same_step = env, env.num_envs, mode == AutoresetMode.SAME_STEP
        self.observation_space = GymSpaceWrapper(env.single_observation_space, name="obs")
        self.action_space = GymSpaceWrapper(env.single_action_space, name="act")
        self._seeds: list[int] | None = None

    def seed(self, seeds: list[int] | None) -> None:
        self._seeds = seeds

    def reset(self) -> Any:
        # (Sync/AsyncVectorEnv take a seed per env; the base VectorEnv.reset says int only.)
        observation, _ = self.env.reset(seed=self._seeds)  # type: ignore[arg-type]  # seed list ok
        self._seeds = None  # later episodes continue each env's random stream
        return torchify_buffer(self.observation_space.convert(observation))

    def step(self, action: Any) -> tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor]:
        action = _gym_batch(self.action_space, numpify_buffer(_buffer_to_cpu(action)))
        observation, reward, terminated, truncated, _ = self.env.step(action)
        if not self.same_step and np.any(terminated | truncated):
            fresh, _ = self.env.reset(options={"reset_mask": terminated | truncated})
            observation = _np_where(terminated | truncated, fresh, observation)
        return (
            torchify_buffer(self.observation_space.convert(observation)),
            torch.from_numpy(np.asarray(reward, np.float32)),
            torch.from_numpy(np.asarray(terminated, bool)),
            torch.from_numpy(np.asarray(truncated, bool)),
        )

    def close(self) -> None:
        self.env.close()


def _buffer_to_cpu(buffer: Any) -> Any:
    if buffer is None:
        return None
    if is_namedarraytuple(buffer):
        return type(buffer)(*(_buffer_to_cpu(x) for x in buffer))
    return buffer.cpu() if isinstance(buffer, torch.Tensor) else buffer


def _gym_batch(space: GymSpaceWrapper, value: Any) -> Any:
    """A batch of our actions as the vector env expects (dicts/tuples of gym-dtype arrays)."""
    if not space._children:
        return np.asarray(value, dtype=space.gym_space.dtype)
    parts = [_gym_batch(c, v) for c, v in zip(space._children, value, strict=True)]
    return dict(zip(space._keys, parts, strict=True)) if space._keys is not None else tuple(parts)


def _np_where(mask: np.ndarray, a: Any, b: Any) -> Any:
    if isinstance(a, dict):
        return {k: _np_where(mask, a[k], b[k]) for k in a}
    if isinstance(a, tuple):
        return tuple(_np_where(mask, x, y) for x, y in zip(a, b, strict=True))
    return np.where(mask.reshape(-1, *([1] * (np.ndim(a) - 1))), a, b)


def _as_batch_env(made: object, num_envs: int) -> BatchEnv | _GymVectorAdapter:
    import gymnasium

    env: BatchEnv | _GymVectorAdapter
    if isinstance(made, gymnasium.vector.VectorEnv):
        env = _GymVectorAdapter(made)
    elif isinstance(made, BatchEnv):
        env = made
    else:
        raise TypeError(
            f"BatchedSampler: make_env({num_envs}) must return a gymnasium VectorEnv or a "
            f"BatchEnv, got {type(made).__name__}"
        )
    if env.num_envs != num_envs:
        raise ValueError(f"BatchedSampler: make_env({num_envs}) made {env.num_envs} envs")
    return env


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
        self.env = _as_batch_env(self.make_env(B), B)
        self.device = normalize_device(self.env.device)
        self._observation_space = _observation_space(self.env)
        self._sum_fields = _traj_info_fields(self.env)
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
        if isinstance(self.env, _GymVectorAdapter):
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
        env = _as_batch_env(self.make_env(1), 1)
        try:
            _env_reset(env)
            null = self.action_space.null_value()
            action = _map2(lambda x, _: torch.as_tensor(x, device=env.device)[None], null, null)
            observation, reward, _, _, extras = _env_step(env, action)
            self._check_critic_shape(observation)
            for name in self._sum_fields:  # (refused now, not at the first batch)
                _extra(env, extras, name)
            agent.reset()
            with torch.no_grad():
                agent_step = agent.step(observation, action, reward)
        finally:
            env.close()

        def first(buf: Any) -> Any:  # env 0 of the one-env batch, as numpy
            return None if buf is None else numpify_buffer(_buffer_to_cpu(buf[0]))

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
        self.observation = _env_reset(self.env)
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
        observation, reward, terminated, truncated, extras = _env_step(self.env, action)
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
            self._stats[:, column] += _extra(self.env, extras, name)
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
