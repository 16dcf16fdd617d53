"""Deep Q-learning from a replay buffer: n-step returns, double DQN, Huber loss, prioritized
replay, target-network updates, and time-limit truncations that are not treated as terminal."""

from __future__ import annotations

import copy
import math
import os
from collections import namedtuple
from typing import Any

import numpy as np
import torch

from rl_arrays import buffer_to, numpify_buffer, select_at_indexes, torchify_buffer
from rl_replay import (
    PrioritizedReplayBuffer,
    PrioritizedReplayFrameBuffer,
    SamplesToBuffer,
    SamplesToBufferTl,
    TlPrioritizedReplayBuffer,
    TlUniformReplayBuffer,
    UniformReplayBuffer,
    UniformReplayFrameBuffer,
)

from ._pg import check_count, check_number, clip_and_step
from ._protocols import QAgentLike

__all__ = ["DQN", "DqnOptInfo", "huber_loss"]

# Diagnostics of one optimize_agent call, one float per gradient step: the loss, the gradient
# norm before clipping and the batch's mean absolute TD error (the priority signal; for
# CategoricalDQN the mean KL divergence that serves as its priority).
DqnOptInfo = namedtuple("DqnOptInfo", ["loss", "gradNorm", "tdAbsErr"])

_AGENT_MEMBERS = ("parameters", "device", "target", "update_target", "set_epsilon_itr_min_max")
_MIN_PRIORITY = 1e-6  # a zero priority would never be drawn again


def huber_loss(delta: torch.Tensor, delta_clip: float | None) -> torch.Tensor:
    """Elementwise ``0.5 * delta**2`` within ``|delta| <= delta_clip`` and linear beyond it,
    so no gradient exceeds ``delta_clip``; the plain squared error when ``delta_clip`` is None."""
    if delta_clip is None:
        return 0.5 * delta**2
    # (one fused operation; the same piecewise formula)
    return torch.nn.functional.huber_loss(
        delta, torch.zeros_like(delta), reduction="none", delta=delta_clip
    )


def example_field(examples: Any, name: str) -> Any:
    """``examples[name]`` for the sampler's dict of examples, or the attribute of a namedtuple."""
    if isinstance(examples, dict):
        if name not in examples:
            raise ValueError(f"examples lacks {name!r}; it has {sorted(examples)}")
        return examples[name]
    if not hasattr(examples, name):
        raise ValueError(f"examples lacks {name!r}: expected the sampler's examples")
    return getattr(examples, name)


def check_agent(agent: Any, algo: str, members: tuple[str, ...], protocol: str) -> None:
    missing = [name for name in members if not hasattr(agent, name)]
    if missing or not callable(agent):
        raise TypeError(
            f"{algo} needs an agent that is callable and has {', '.join(members)} (see "
            f"rl_algos.{protocol}); missing: {', '.join(missing) or '__call__'}"
        )


class DQN:
    """DQN trained from a replay buffer (rlpyt's algorithm and argument names).

    Each ``optimize_agent`` appends the sampler's batch to the replay buffer and, from
    iteration ``min_itr_learn`` on, takes ``updates_per_optimize`` gradient steps
    (``round(replay_ratio * sampler batch size / batch_size)``, at least one) on batches of
    ``batch_size`` transitions. The target is ``return_ + discount**n_step_return * (1 -
    done_n) * Q_target(s', a')`` with ``a'`` the target net's argmax, or the online net's with
    ``double_dqn``; the loss is Huber with ``delta_clip`` (squared error when None), weighted
    by importance weights with ``prioritized_replay``, whose new priorities are the absolute
    TD errors (clipped at ``delta_clip``). Every ``target_update_interval`` updates the agent's
    target moves by ``target_update_tau``.

    ``frame_buffer`` stores observations ``[n_frames, ...]`` (stacked image frames) one frame
    per step. ``bootstrap_timelimit`` reads ``env_info.timeout`` from the samples: transitions
    whose n-step window was truncated by a time limit are left out of the loss, since their
    successor observation is not stored, instead of being taught a terminal value of zero.
    """

    bootstrap_value = False  # the sampler need not record a bootstrap value
    OptInfoCls: Any = DqnOptInfo
    opt_info_fields: tuple[str, ...] = DqnOptInfo._fields

    def __init__(
        self,
        discount: float = 0.99,
        batch_size: int = 32,
        min_steps_learn: int = int(5e4),
        delta_clip: float | None = 1.0,
        replay_size: int = int(1e6),
        replay_ratio: float = 8,
        target_update_tau: float = 1,
        target_update_interval: int = 312,
        n_step_return: int = 1,
        learning_rate: float = 2.5e-4,
        OptimCls: Any = torch.optim.Adam,
        optim_kwargs: dict[str, Any] | None = None,
        initial_optim_state_dict: dict[str, Any] | None = None,
        clip_grad_norm: float | None = 10.0,
        eps_steps: int = int(1e6),
        double_dqn: bool = False,
        prioritized_replay: bool = False,
        pri_alpha: float = 0.6,
        pri_beta_init: float = 0.4,
        pri_beta_final: float = 1.0,
        pri_beta_steps: int = int(50e6),
        default_priority: float | None = None,
        ReplayBufferCls: Any = None,
        updates_per_sync: int = 1,
        frame_buffer: bool = False,
        bootstrap_timelimit: bool = False,
    ):
        check_number("discount", discount, 0, 1)
        check_count("batch_size", batch_size)
        check_count("min_steps_learn", min_steps_learn, 0)
        if delta_clip is not None:
            _check_positive("delta_clip", delta_clip)
        check_count("replay_size", replay_size)
        _check_positive("replay_ratio", replay_ratio)
        _check_positive("target_update_tau", target_update_tau)
        check_number("target_update_tau", target_update_tau, 0, 1)
        check_count("target_update_interval", target_update_interval)
        check_count("n_step_return", n_step_return)
        check_number("learning_rate", learning_rate, 0)
        if not callable(OptimCls):
            raise ValueError(f"OptimCls must be an optimizer class, got {OptimCls!r}")
        if optim_kwargs is not None and not isinstance(optim_kwargs, dict):
            raise ValueError(f"optim_kwargs must be a dict or None, got {optim_kwargs!r}")
        if clip_grad_norm is not None:
            check_number("clip_grad_norm", clip_grad_norm, 0)
        check_count("eps_steps", eps_steps, 0)
        check_number("pri_alpha", pri_alpha, 0)
        check_number("pri_beta_init", pri_beta_init, 0)
        check_number("pri_beta_final", pri_beta_final, 0)
        check_count("pri_beta_steps", pri_beta_steps)
        if default_priority is not None:
            _check_positive("default_priority", default_priority)
        if ReplayBufferCls is not None and not callable(ReplayBufferCls):
            raise ValueError(
                f"ReplayBufferCls must be a replay buffer class, got {ReplayBufferCls!r}"
            )
        check_count("updates_per_sync", updates_per_sync)
        if frame_buffer and bootstrap_timelimit and ReplayBufferCls is None:
            raise ValueError(
                "frame_buffer and bootstrap_timelimit cannot be combined: rl-replay has no "
                "time-limit frame buffer (give ReplayBufferCls, or drop one of them)"
            )
        self.discount = discount
        self.batch_size = int(batch_size)
        self.min_steps_learn = int(min_steps_learn)
        self.delta_clip = delta_clip
        self.replay_size = int(replay_size)
        self.replay_ratio = replay_ratio
        self.target_update_tau = target_update_tau
        self.target_update_interval = int(target_update_interval)
        self.n_step_return = int(n_step_return)
        self.learning_rate = learning_rate
        self.OptimCls = OptimCls
        if optim_kwargs is None and OptimCls in (torch.optim.Adam, torch.optim.AdamW):
            # rlpyt's epsilon for DQN's Adam, and the fused implementation (one kernel for
            # every parameter where the default loops over them).
            optim_kwargs = {"eps": 0.01 / self.batch_size, "fused": True}
        self.optim_kwargs = dict(optim_kwargs or {})
        self.initial_optim_state_dict = initial_optim_state_dict
        self.clip_grad_norm = clip_grad_norm
        self.eps_steps = int(eps_steps)
        self.double_dqn = bool(double_dqn)
        self.prioritized_replay = bool(prioritized_replay)
        self.pri_alpha = pri_alpha
        self.pri_beta_init = pri_beta_init
        self.pri_beta_final = pri_beta_final
        self.pri_beta_steps = int(pri_beta_steps)
        # New samples enter at the largest priority a clipped TD error can have (rlpyt).
        if default_priority is None:
            default_priority = 1.0 if delta_clip is None else delta_clip
        self.default_priority = default_priority
        self.ReplayBufferCls = ReplayBufferCls
        self.updates_per_sync = int(updates_per_sync)
        self.frame_buffer = bool(frame_buffer)
        self.bootstrap_timelimit = bool(bootstrap_timelimit)
        self.agent: Any = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.replay_buffer: Any = None
        self.update_counter = 0
        self.pri_beta = pri_beta_init if self.prioritized_replay else None

    # ------------------------------------------------------------------ set-up

    def initialize(
        self,
        agent: QAgentLike,
        n_itr: int,
        batch_spec: Any,
        mid_batch_reset: bool = False,
        examples: Any = None,
        world_size: int = 1,
        rank: int = 0,
    ) -> None:
        """Keep the agent, size the run from ``batch_spec`` (``updates_per_optimize``,
        ``min_itr_learn``, the agent's epsilon schedule), build the replay buffer from
        ``examples`` (one step of each field, as the sampler returns them) and the optimizer.

        ``mid_batch_reset=False`` is accepted, but a wait-reset sampler's blank steps after
        a done are then replayed as terminal transitions with zero reward (as in rlpyt).
        """
        self._check_agent(agent)
        check_count("n_itr", n_itr)
        check_count("world_size", world_size)
        check_count("rank", rank, 0)
        T, B = getattr(batch_spec, "T", None), getattr(batch_spec, "B", None)
        if (
            isinstance(T, bool)
            or not isinstance(T, int)
            or isinstance(B, bool)
            or not isinstance(B, int)
        ):
            raise ValueError(f"batch_spec must have integer T and B, got {batch_spec!r}")
        if examples is None:
            raise ValueError(
                "examples is needed to build the replay buffer (the sampler returns it)"
            )
        self.agent = agent
        self.n_itr = int(n_itr)
        self.batch_spec = batch_spec
        self.mid_batch_reset = bool(mid_batch_reset)
        self.world_size, self.rank = int(world_size), int(rank)
        self.sampler_bs = T * B
        self.updates_per_optimize = max(
            1, round(self.replay_ratio * self.sampler_bs / self.batch_size)
        )
        self.min_itr_learn = self.min_steps_learn // self.sampler_bs
        agent.set_epsilon_itr_min_max(self.min_itr_learn, max(1, self.eps_steps // self.sampler_bs))
        self.initialize_replay_buffer(examples, batch_spec)
        self._check_learning_start(T)
        self.optim_initialize(rank)

    def optim_initialize(self, rank: int = 0) -> None:
        """Build the optimizer over the agent's parameters, load ``initial_optim_state_dict``
        when given, and place the importance-weight schedule."""
        self.rank = rank
        self._params = list(self._agent.parameters())
        if not self._params:
            raise ValueError("agent.parameters() is empty: there is nothing to optimize")
        self.optimizer = self.OptimCls(self._params, lr=self.learning_rate, **self.optim_kwargs)
        if self.initial_optim_state_dict is not None:
            self.load_optim_state_dict(self.initial_optim_state_dict)
        if self.prioritized_replay:
            self.pri_beta_itr = max(1, self.pri_beta_steps // self.sampler_bs)

    def initialize_replay_buffer(self, examples: Any, batch_spec: Any) -> None:
        """The replay buffer, sized ``replay_size`` over ``batch_spec.B`` environments, seeded
        from torch's generator (so a seeded run replays the same batches)."""
        kwargs: dict[str, Any] = dict(
            example=numpify_buffer(self.examples_to_buffer(examples)),
            size=self.replay_size,
            B=batch_spec.B,
            discount=self.discount,
            n_step_return=self.n_step_return,
            seed=int(torch.randint(2**62, ())),
        )
        kwargs.update(self._replay_kwargs())
        if self.prioritized_replay:
            kwargs.update(
                alpha=self.pri_alpha,
                beta=self.pri_beta_init,
                default_priority=self.default_priority,
            )
        ReplayCls = self.ReplayBufferCls or self._default_replay_cls()
        self.replay_buffer = ReplayCls(**kwargs)

    def _replay_kwargs(self) -> dict[str, Any]:
        return {}

    def _default_replay_cls(self) -> Any:
        if self.prioritized_replay:
            if self.frame_buffer:
                return PrioritizedReplayFrameBuffer
            return (
                TlPrioritizedReplayBuffer if self.bootstrap_timelimit else PrioritizedReplayBuffer
            )
        if self.frame_buffer:
            return UniformReplayFrameBuffer
        return TlUniformReplayBuffer if self.bootstrap_timelimit else UniformReplayBuffer

    def _check_agent(self, agent: Any) -> None:
        check_agent(agent, type(self).__name__, _AGENT_MEMBERS, "QAgentLike")
        if getattr(agent, "recurrent", False):
            raise TypeError(
                f"{type(self).__name__} takes a feed-forward agent; use R2D1 for a recurrent one"
            )

    def _steps_to_first_batch(self) -> int:
        """Steps per environment the replay buffer needs before it can give a batch."""
        buffer, B = self.replay_buffer, self.batch_spec.B
        off_forward = getattr(buffer, "off_forward", 1)
        return off_forward + self.n_step_return + math.ceil(self.batch_size / B)

    def _check_learning_start(self, T: int) -> None:
        needed = self._steps_to_first_batch()
        have = (self.min_itr_learn + 1) * T
        if have < needed:
            raise ValueError(
                f"min_steps_learn={self.min_steps_learn} starts learning at iteration "
                f"{self.min_itr_learn}, when the replay buffer holds {have} steps per "
                f"environment, but it needs {needed} to sample a first batch: make "
                f"min_steps_learn at least {(math.ceil(needed / T) - 1) * self.sampler_bs}"
            )

    # ------------------------------------------------------------------ data

    def examples_to_buffer(self, examples: Any) -> Any:
        """One step of what the replay buffer stores, from the sampler's examples."""
        fields = {
            name: example_field(examples, name)
            for name in ("observation", "action", "reward", "done")
        }
        if not self.bootstrap_timelimit:
            return SamplesToBuffer(**fields)
        return SamplesToBufferTl(
            **fields, timeout=_timeout(example_field(examples, "env_info"), "examples")
        )

    def samples_to_buffer(self, samples: Any) -> Any:
        """What the replay buffer stores from a ``[T, B]`` batch of samples (numpy)."""
        fields = dict(
            observation=samples.env.observation,
            action=samples.agent.action,
            reward=samples.env.reward,
            done=samples.env.done,
        )
        if self.bootstrap_timelimit:
            fields["timeout"] = _timeout(samples.env.env_info, "samples.env")
            return numpify_buffer(SamplesToBufferTl(**fields))
        return numpify_buffer(SamplesToBuffer(**fields))

    # ------------------------------------------------------------------ training

    def optimize_agent(self, itr: int, samples: Any = None, sampler_itr: int | None = None) -> Any:
        """Store ``samples`` (when given), then, from ``min_itr_learn`` on, take
        ``updates_per_optimize`` gradient steps on replayed batches. Returns the OptInfo of
        lists, empty before learning starts. ``sampler_itr`` replaces ``itr`` (async use)."""
        itr = itr if sampler_itr is None else sampler_itr
        buffer = self._replay_buffer
        if samples is not None:
            buffer.append_samples(self.samples_to_buffer(samples))
        opt_info = self.OptInfoCls(*([] for _ in self.OptInfoCls._fields))
        if itr < self.min_itr_learn:
            return opt_info
        for _ in range(self.updates_per_optimize):
            batch = self._to_device(buffer.sample_batch(self._replay_batch_B()))
            self._optimizer.zero_grad()
            loss, td_abs_errors, priorities = self._loss_and_priorities(batch)
            loss.backward()
            grad_norm = self._clip_and_step()
            if self.prioritized_replay:
                buffer.update_batch_priorities(priorities.clamp(min=_MIN_PRIORITY).cpu().numpy())
            self._record(opt_info, loss, grad_norm, td_abs_errors, priorities)
            self.update_counter += 1
            if self.update_counter % self.target_update_interval == 0:
                self._agent.update_target(self.target_update_tau)
        self.update_itr_hyperparams(itr)
        return opt_info

    def _replay_batch_B(self) -> int:
        return self.batch_size

    def _loss_and_priorities(self, batch: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        loss, td_abs_errors = self.loss(batch)
        return loss, td_abs_errors, td_abs_errors

    def _record(
        self, opt_info: Any, loss: Any, grad_norm: float, td_abs_errors: Any, priorities: Any
    ) -> None:
        opt_info.loss.append(loss.item())
        opt_info.gradNorm.append(grad_norm)
        opt_info.tdAbsErr.append(td_abs_errors.mean().item())

    def loss(self, samples: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """``(loss, |TD error| per transition)`` on a replayed batch (leading dim [B], tensors
        on the agent's device); the loss has grad, the errors (clipped at ``delta_clip``,
        zero where masked) do not."""
        q = select_at_indexes(samples.action, self._agent(*samples.agent_inputs))
        with torch.no_grad():
            target_q = self.target_q(samples.target_inputs)
            not_done = 1 - samples.done_n.to(target_q.dtype)
            y = samples.return_ + not_done * self.discount**self.n_step_return * target_q
        delta = y - q
        losses = huber_loss(delta, self.delta_clip)
        td_abs_errors = delta.detach().abs()
        if self.delta_clip is not None:
            td_abs_errors = td_abs_errors.clamp(max=self.delta_clip)
        return self._weighted_mean(losses, td_abs_errors, samples)

    def target_q(self, target_inputs: Any) -> torch.Tensor:
        """``Q_target(s', a')`` with ``a'`` the target net's greedy action, or the online
        net's with ``double_dqn`` (which is less biased upwards). Call without grad."""
        target_qs = self._agent.target(*target_inputs)
        if self.double_dqn:
            next_action = self._agent(*target_inputs).argmax(dim=-1)
            return select_at_indexes(next_action, target_qs)
        return target_qs.max(dim=-1).values

    def _weighted_mean(
        self, losses: torch.Tensor, errors: torch.Tensor, samples: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The batch loss: importance-weighted with prioritized replay, and with
        ``bootstrap_timelimit`` averaged over the transitions not truncated within n steps
        (whose errors are zeroed)."""
        if self.prioritized_replay:
            losses = losses * samples.is_weights
        if not self.bootstrap_timelimit:
            return losses.mean(), errors
        valid = 1 - samples.timeout_n.to(losses.dtype)
        loss = (losses * valid).sum() / valid.sum().clamp(min=1)
        return loss, errors * valid

    def update_itr_hyperparams(self, itr: int) -> None:
        """Anneal the importance-sampling exponent beta linearly from ``pri_beta_init`` at
        ``min_itr_learn`` to ``pri_beta_final`` after ``pri_beta_steps`` sampled steps."""
        if not self.prioritized_replay:
            return
        span = max(1, self.pri_beta_itr - self.min_itr_learn)
        progress = min(1.0, max(0, itr - self.min_itr_learn) / span)
        self.pri_beta = self.pri_beta_init + progress * (self.pri_beta_final - self.pri_beta_init)
        self._replay_buffer.set_beta(self.pri_beta)

    def _clip_and_step(self) -> float:
        """Clip the gradient norm, take an optimizer step; returns the norm before clipping."""
        return float(clip_and_step(self._optimizer, self._params, self.clip_grad_norm))

    def _to_device(self, batch: Any) -> Any:
        return buffer_to(torchify_buffer(batch), self._agent.device)

    # ------------------------------------------------------------------ state

    def optim_state_dict(self) -> dict[str, Any]:
        """A copy of what resuming needs besides the agent and the replay buffer: optimizer,
        update counter and beta (tensors, numbers and dicts: loads with ``weights_only``)."""
        return {
            "optimizer": copy.deepcopy(self._optimizer.state_dict()),
            "update_counter": self.update_counter,
            "pri_beta": self.pri_beta,
        }

    def load_optim_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what :meth:`optim_state_dict` returned (a bare ``optimizer.state_dict()``,
        as rlpyt saved, restores the optimizer only)."""
        if not isinstance(state_dict, dict):
            raise TypeError(f"state_dict must be a dict, got {type(state_dict).__name__}")
        if "param_groups" in state_dict:
            self._optimizer.load_state_dict(copy.deepcopy(state_dict))
            return
        missing = [
            key for key in ("optimizer", "update_counter", "pri_beta") if key not in state_dict
        ]
        if missing:
            raise ValueError(
                f"state_dict is missing {', '.join(map(repr, missing))}; expected what "
                "optim_state_dict() returns"
            )
        self._optimizer.load_state_dict(copy.deepcopy(state_dict["optimizer"]))
        self.update_counter = int(state_dict["update_counter"])
        if self.prioritized_replay and state_dict["pri_beta"] is not None:
            self.pri_beta = float(state_dict["pri_beta"])
            if self.replay_buffer is not None:
                self.replay_buffer.set_beta(self.pri_beta)

    def save_replay(self, path: str | os.PathLike[str]) -> None:
        """Write the replay buffer's whole state to ``path`` (.npz, written atomically)."""
        self._replay_buffer.save(path)

    def load_replay(self, path: str | os.PathLike[str]) -> None:
        """Restore the replay buffer saved by :meth:`save_replay` (same settings)."""
        self._replay_buffer.load(path)
        if self.prioritized_replay and self.pri_beta is not None:
            self._replay_buffer.set_beta(self.pri_beta)

    # ------------------------------------------------------------------ guards

    @property
    def _agent(self) -> Any:
        if self.agent is None:
            raise RuntimeError(f"{type(self).__name__}.initialize(agent, ...) must be called first")
        return self.agent

    @property
    def _optimizer(self) -> torch.optim.Optimizer:
        if self.optimizer is None:
            raise RuntimeError(f"{type(self).__name__}.initialize(agent, ...) must be called first")
        return self.optimizer

    @property
    def _replay_buffer(self) -> Any:
        if self.replay_buffer is None:
            raise RuntimeError(f"{type(self).__name__}.initialize(agent, ...) must be called first")
        return self.replay_buffer


def _check_positive(name: str, value: Any) -> None:
    check_number(name, value, 0)
    if value == 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")


def _timeout(env_info: Any, where: str) -> Any:
    timeout = getattr(env_info, "timeout", None)
    if timeout is None:
        raise ValueError(
            f"bootstrap_timelimit needs {where}.env_info.timeout (the environment's truncation "
            f"flag); env_info is {type(env_info).__name__}"
        )
    return np.asarray(numpify_buffer(timeout), dtype=bool)
