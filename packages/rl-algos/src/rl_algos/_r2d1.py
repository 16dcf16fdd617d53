"""Recurrent replay distributed DQN (R2D1, the single-learner R2D2): sequence replay with stored
rnn states, a burn-in (warm-up) of each sequence, value rescaling, and sequence priorities."""

from __future__ import annotations

import math
from collections import namedtuple
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from rl_arrays import (
    BatchSpec,
    buffer_func,
    buffer_method,
    numpify_buffer,
    select_at_indexes,
    valid_mean,
)
from rl_replay import BaseNStepReturnBuffer, PrioritiesSamplesToBuffer, discount_return_n_step

from ._compile import compiled
from ._dqn import DQN, huber_loss
from ._pg import check_count, check_number
from ._protocols import R2d1AgentLike
from ._replay_algo import check_agent
from ._replay_feed import (
    check_sequence_sampling,
    sequence_replay_cls,
    stored_sequence_example,
    stored_sequence_samples,
)
from ._returns import valid_from_done

__all__ = ["R2D1", "R2d1OptInfo", "inv_value_rescale", "value_rescale"]

# DQN's diagnostics plus the mean new priority of the replayed sequences, per gradient step.
R2d1OptInfo = namedtuple("R2d1OptInfo", ["loss", "gradNorm", "tdAbsErr", "priority"])

_AGENT_MEMBERS = ("parameters", "device", "target", "update_target", "set_epsilon_itr_min_max")


def value_rescale(x: torch.Tensor, eps: float = 1e-3) -> torch.Tensor:
    """``h(x) = sign(x) * (sqrt(|x| + 1) - 1) + eps * x``: squashes returns of any scale (raw,
    unclipped game scores) into a range one network can fit; invertible for ``eps >= 0``."""
    return x.sign() * ((x.abs() + 1).sqrt() - 1) + eps * x


def inv_value_rescale(z: torch.Tensor, eps: float = 1e-3) -> torch.Tensor:
    """The exact inverse of :func:`value_rescale`.

    With ``u = sqrt(|x| + 1)``, ``|z| = u - 1 + eps * (u**2 - 1)`` is a quadratic in ``u``; its
    positive root is written ``2c / (1 + sqrt(1 + 4 eps c))`` with ``c = |z| + 1 + eps``, which
    has no division by ``eps`` (so ``eps = 0`` works) and no cancellation.
    """
    c = z.abs() + 1 + eps
    u = 2 * c / (1 + (1 + 4 * eps * c).sqrt())
    return z.sign() * (u**2 - 1)


def sequence_priorities(
    td_abs_errors: torch.Tensor, valid: torch.Tensor, eta: float
) -> torch.Tensor:
    """One priority per sequence (``[T, B]`` -> ``[B]``): ``eta * max + (1 - eta) * mean`` of
    the absolute TD errors over the valid steps (R2D2's mixture: the max keeps rare large
    errors visible, the mean keeps long sequences from being judged by one step)."""
    max_error = (td_abs_errors * valid).max(dim=0).values
    return eta * max_error + (1 - eta) * valid_mean(td_abs_errors, valid, dim=0)


def rescaled_n_step_target(
    return_: torch.Tensor,
    not_done: torch.Tensor,
    bootstrap: torch.Tensor,
    discount_n: float,
    eps: float,
) -> torch.Tensor:
    """``h(return_ + discount_n * not_done * h^-1(bootstrap))`` (``h``: :func:`value_rescale`
    with ``eps``): the bootstrap is unscaled to returns, discounted, added, and scaled back."""
    return value_rescale(return_ + not_done * discount_n * inv_value_rescale(bootstrap, eps), eps)


def input_sequence_priorities(
    samples: Any,
    n_step_return: int,
    discount: float,
    value_scale_eps: float,
    delta_clip: float | None,
    eta: float,
) -> np.ndarray:
    """One priority per environment ``[B]`` (numpy) for a new ``[T, B]`` batch, from the
    n-step TD errors of the Q-values the agent recorded (``agent_info.q``), mixed over the
    steps up to the first done as in :func:`sequence_priorities`."""
    n = n_step_return
    reward, done = numpify_buffer((samples.env.reward, samples.env.done))
    return_n, done_n = discount_return_n_step(reward, done, n, discount)
    L = reward.shape[0] - n  # steps whose bootstrap step t + n is in the batch
    q = torch.as_tensor(numpify_buffer(samples.agent.agent_info.q)).float()
    action = torch.as_tensor(numpify_buffer(samples.agent.action))
    q_taken = select_at_indexes(action[:L], q[:L])
    # The online net's recorded Q stands in for the target's (double DQN's pick is its max).
    bootstrap = q[n:].max(dim=-1).values
    not_done = 1 - torch.as_tensor(done_n[:L]).float()
    y = rescaled_n_step_target(
        torch.as_tensor(return_n[:L]), not_done, bootstrap, discount**n, value_scale_eps
    )
    td_abs_errors = (y - q_taken).abs()
    if delta_clip is not None:
        td_abs_errors = td_abs_errors.clamp(max=delta_clip)
    valid = valid_from_done(torch.as_tensor(done[:L]))
    return sequence_priorities(td_abs_errors, valid, eta).numpy()


class R2D1(DQN):
    """Recurrent DQN trained on replayed sequences (rlpyt's R2D1 and argument names).

    Sequences of ``warmup_T + batch_T`` steps (plus ``n_step_return``) start at stored rnn
    states (every ``store_rnn_state_interval`` steps; 0: from the agent's zero state). The
    warm-up runs without grad; the loss covers the next ``batch_T`` steps up to the first done,
    on value-rescaled targets. Sequence priorities mix the max and mean absolute TD errors
    (``pri_eta``); ``input_priorities`` sets new samples' priorities from ``agent_info.q``.
    ``batch_size`` is ``(batch_T + warmup_T) * batch_B``, as in rlpyt. Details: the package
    README, "The Q-learners".
    """

    OptInfoCls: Any = R2d1OptInfo
    opt_info_fields: tuple[str, ...] = R2d1OptInfo._fields
    # R2D1 runs DQN's loop with a recurrent agent, an R2d1AgentLike (it takes and returns rnn
    # states), which is no QAgentLike: R2D1 cannot stand in for a DQN, and mypy flags the
    # overrides that retype the agent (here, initialize, async_initialize and _agent) and
    # loss (which returns the priorities too).
    agent: R2d1AgentLike | None  # type: ignore[assignment]  # (see above)

    def __init__(
        self,
        discount: float = 0.997,
        batch_T: int = 80,
        batch_B: int = 64,
        warmup_T: int = 40,
        store_rnn_state_interval: int = 40,
        min_steps_learn: int = int(1e5),
        delta_clip: float | None = None,
        replay_size: int = int(1e6),
        replay_ratio: float = 1,
        target_update_interval: int = 2500,
        n_step_return: int = 5,
        learning_rate: float = 1e-4,
        OptimCls: Callable[..., torch.optim.Optimizer] = torch.optim.Adam,
        optim_kwargs: dict[str, Any] | None = None,
        initial_optim_state_dict: dict[str, Any] | None = None,
        clip_grad_norm: float | None = 80.0,
        eps_steps: int = int(1e6),
        double_dqn: bool = True,
        prioritized_replay: bool = True,
        pri_alpha: float = 0.6,
        pri_beta_init: float = 0.9,
        pri_beta_final: float = 0.9,
        pri_beta_steps: int = int(50e6),
        pri_eta: float = 0.9,
        default_priority: float | None = None,
        input_priorities: bool = True,
        input_priority_shift: int | None = None,
        value_scale_eps: float = 1e-3,
        ReplayBufferCls: Callable[..., BaseNStepReturnBuffer] | None = None,
        updates_per_sync: int = 1,
        frame_buffer: bool | None = None,
        compile: bool | dict[str, Any] = False,
    ):
        batch_T = check_count("batch_T", batch_T)
        batch_B = check_count("batch_B", batch_B)
        warmup_T = check_count("warmup_T", warmup_T, 0)
        store_rnn_state_interval = check_count(
            "store_rnn_state_interval", store_rnn_state_interval, 0
        )
        check_number("pri_eta", pri_eta, 0, 1)
        check_number("value_scale_eps", value_scale_eps, 0)
        if input_priority_shift is None:
            input_priority_shift = warmup_T // max(store_rnn_state_interval, 1)
        input_priority_shift = check_count("input_priority_shift", input_priority_shift, 0)
        if optim_kwargs is None and OptimCls in (torch.optim.Adam, torch.optim.AdamW):
            optim_kwargs = {"eps": 1e-3, "fused": True}  # rlpyt's epsilon for R2D1
        super().__init__(
            discount=discount,
            batch_size=batch_B,
            min_steps_learn=min_steps_learn,
            delta_clip=delta_clip,
            replay_size=replay_size,
            replay_ratio=replay_ratio,
            target_update_tau=1,
            target_update_interval=target_update_interval,
            n_step_return=n_step_return,
            learning_rate=learning_rate,
            OptimCls=OptimCls,
            optim_kwargs=optim_kwargs,
            initial_optim_state_dict=initial_optim_state_dict,
            clip_grad_norm=clip_grad_norm,
            eps_steps=eps_steps,
            double_dqn=double_dqn,
            prioritized_replay=prioritized_replay,
            pri_alpha=pri_alpha,
            pri_beta_init=pri_beta_init,
            pri_beta_final=pri_beta_final,
            pri_beta_steps=pri_beta_steps,
            default_priority=default_priority,
            ReplayBufferCls=ReplayBufferCls,
            updates_per_sync=updates_per_sync,
            frame_buffer=frame_buffer,
            compile=compile,
        )
        self.batch_T = batch_T
        self.batch_B = batch_B
        self.warmup_T = warmup_T
        self.store_rnn_state_interval = store_rnn_state_interval
        self.batch_size = (self.batch_T + self.warmup_T) * self.batch_B
        self.pri_eta = pri_eta
        # Input priorities go into a prioritized buffer only.
        self.input_priorities = bool(input_priorities) and self.prioritized_replay
        self.input_priority_shift = input_priority_shift
        self.value_scale_eps = value_scale_eps

    # ------------------------------------------------------------------ set-up

    def initialize(  # type: ignore[override]  # R2d1AgentLike: see agent
        self,
        agent: R2d1AgentLike,
        n_itr: int,
        batch_spec: BatchSpec,
        mid_batch_reset: bool = False,
        examples: Any = None,
        world_size: int = 1,
        rank: int = 0,
    ) -> None:
        """As ``ReplayAlgo.initialize``, with a recurrent agent."""
        super().initialize(
            agent,  # type: ignore[arg-type]  # R2d1AgentLike: see agent
            n_itr,
            batch_spec,
            mid_batch_reset,
            examples,
            world_size,
            rank,
        )

    def async_initialize(  # type: ignore[override]  # R2d1AgentLike: see agent
        self,
        agent: R2d1AgentLike,
        sampler_n_itr: int,
        batch_spec: BatchSpec,
        mid_batch_reset: bool,
        examples: Any,
        world_size: int = 1,
    ) -> BaseNStepReturnBuffer:
        """As ``ReplayAlgo.async_initialize``, with a recurrent agent."""
        return super().async_initialize(
            agent,  # type: ignore[arg-type]  # R2d1AgentLike: see agent
            sampler_n_itr,
            batch_spec,
            mid_batch_reset,
            examples,
            world_size,
        )

    @property
    def _agent(self) -> R2d1AgentLike:  # type: ignore[override]  # R2d1AgentLike: see agent
        return self._require(self.agent)

    def _setup(
        self,
        agent: Any,
        n_itr: int,
        batch_spec: BatchSpec,
        mid_batch_reset: bool,
        examples: Any,
        world_size: int,
        async_: bool,
    ) -> None:
        """As DQN's, after checking that the sampler's batches suit the replay: whole
        rnn-state intervals for prioritized replay, more than ``n_step_return`` steps and
        ``agent_info.q`` in the examples for input priorities."""
        check_sequence_sampling(
            batch_spec,
            examples,
            self.store_rnn_state_interval,
            self.prioritized_replay,
            self.input_priorities,
            self.n_step_return,
        )
        super()._setup(agent, n_itr, batch_spec, mid_batch_reset, examples, world_size, async_)

    def _check_agent(self, agent: object) -> None:
        check_agent(agent, "R2D1", _AGENT_MEMBERS, "R2d1AgentLike")

    def _replay_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = dict(
            super()._replay_kwargs(),
            rnn_state_interval=self.store_rnn_state_interval,
            batch_T=self.warmup_T + self.batch_T,
        )
        if self.prioritized_replay:
            kwargs.update(
                input_priorities=self.input_priorities,
                input_priority_shift=self.input_priority_shift,
            )
        return kwargs

    def _default_replay_cls(self, example: Any) -> type[BaseNStepReturnBuffer]:
        return sequence_replay_cls(self.prioritized_replay, self._stores_frames(example))

    def _steps_to_first_batch(self) -> int:
        """Steps per environment before ``batch_B`` whole sequences can start at stored states."""
        interval = max(self.store_rnn_state_interval, 1)
        off_forward = getattr(self.replay_buffer, "off_forward", 1)
        first_start = math.ceil(off_forward / interval) * interval
        starts_needed = math.ceil(self.batch_B / self.batch_spec.B)
        last_start = first_start + (starts_needed - 1) * interval
        return last_start + self.warmup_T + self.batch_T + self.n_step_return

    def _replay_batch_B(self) -> int:
        return self.batch_B

    # ------------------------------------------------------------------ data

    def examples_to_buffer(self, examples: Any) -> Any:
        return stored_sequence_example(examples, self.store_rnn_state_interval > 0)

    def samples_to_buffer(self, samples: Any) -> Any:
        """The sequence data to store (numpy), with input priorities when they are on."""
        stored = stored_sequence_samples(samples, self.store_rnn_state_interval > 0)
        if not self.input_priorities:
            return stored
        return PrioritiesSamplesToBuffer(
            priorities=self.compute_input_priorities(samples), samples=stored
        )

    def compute_input_priorities(self, samples: Any) -> np.ndarray:
        """One priority per environment ``[B]`` (numpy) for a new ``[T, B]`` batch, from the
        n-step TD errors of the Q-values the agent recorded (``agent_info.q``), mixed over the
        steps up to the first done as in :func:`sequence_priorities`. Uses only ``samples``
        (no state), so any process may call it."""
        return input_sequence_priorities(
            samples,
            self.n_step_return,
            self.discount,
            self.value_scale_eps,
            self.delta_clip,
            self.pri_eta,
        )

    # ------------------------------------------------------------------ training

    def _compile_losses(self, options: dict[str, Any] | None) -> None:
        self._loss_fn = compiled(self._loss_and_priorities, options, recurrent=True)

    def _loss_and_priorities(self, batch: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.loss(batch)

    def _record(self, variant: tuple[bool, ...], outputs: tuple[Any, ...], opt_info: Any) -> None:
        super()._record(variant, outputs, opt_info)
        opt_info.priority.append(outputs[3].mean())

    def loss(  # type: ignore[override]  # (see the class: also the priorities)
        self, samples: Any
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(loss, |TD error| [batch_T, B] (zero after a done), new priorities [B])`` on a
        replayed batch of sequences (tensors on the agent's device, leading dims [T, B])."""
        agent = self._agent
        wT, bT, n = self.warmup_T, self.batch_T, self.n_step_return
        observation, prev_action, prev_reward = (
            samples.all_observation,
            samples.all_action,
            samples.all_reward,
        )

        def inputs(start: int, stop: int | None = None) -> tuple[Any, Any, Any]:
            """The agent's inputs (observation, prev_action, prev_reward) over the steps."""
            return observation[start:stop], prev_action[start:stop], prev_reward[start:stop]

        rnn_state = self._init_rnn_state(samples.init_rnn_state)
        target_rnn_state = rnn_state
        if wT > 0:  # burn-in: no gradient flows into the first warmup_T steps
            with torch.no_grad():
                _, target_rnn_state = agent.target(*inputs(0, wT), rnn_state)
                _, rnn_state = agent(*inputs(0, wT), rnn_state)
            ended = samples.done[:wT].any(dim=0)  # [B]: a new episode began during warm-up
            rnn_state = _zero_where(rnn_state, ended)
            target_rnn_state = _zero_where(target_rnn_state, ended)
        # One online pass over the batch_T training steps and the n after them: the first
        # batch_T give Q(s_t, a_t), the last batch_T double DQN's choice at s_{t+n}.
        qs, _ = agent(*inputs(wT), rnn_state)  # [bT + n, B, A]
        q = select_at_indexes(samples.action[wT : wT + bT], qs[:bT])
        with torch.no_grad():
            target_qs, _ = agent.target(*inputs(wT), target_rnn_state)
            chooser = qs.detach()[n:] if self.double_dqn else target_qs[n:]
            bootstrap = select_at_indexes(chooser.argmax(dim=-1), target_qs[n:])
            not_done = 1 - samples.done_n[wT:].to(bootstrap.dtype)
            y = rescaled_n_step_target(
                samples.return_[wT:], not_done, bootstrap, self.discount**n, self.value_scale_eps
            )
        delta = y - q
        losses = huber_loss(delta, self.delta_clip)
        if self.prioritized_replay:
            losses = losses * samples.is_weights.unsqueeze(0)
        valid = valid_from_done(samples.done[wT:]).to(losses.dtype)  # the state runs on past a done
        loss = valid_mean(losses, valid)
        td_abs_errors = delta.detach().abs()
        if self.delta_clip is not None:
            td_abs_errors = td_abs_errors.clamp(max=self.delta_clip)
        td_abs_errors = td_abs_errors * valid
        return loss, td_abs_errors, sequence_priorities(td_abs_errors, valid, self.pri_eta)

    @staticmethod
    def _init_rnn_state(stored: Any) -> Any:
        """The replayed state, stored ``[B, N, H]``, in the agent's ``[N, B, H]`` layout."""
        if stored is None:
            return None
        return buffer_method(buffer_method(stored, "transpose", 0, 1), "contiguous")

    def value_scale(self, x: torch.Tensor) -> torch.Tensor:
        """:func:`value_rescale` with this algorithm's ``value_scale_eps``."""
        return value_rescale(x, self.value_scale_eps)

    def inv_value_scale(self, z: torch.Tensor) -> torch.Tensor:
        """:func:`inv_value_rescale` with this algorithm's ``value_scale_eps``."""
        return inv_value_rescale(z, self.value_scale_eps)


def _zero_where(rnn_state: Any, mask: torch.Tensor) -> Any:
    """``rnn_state`` (leaves ``[N, B, ...]``) with the columns of ``mask`` ([B]) zeroed."""
    if rnn_state is None:
        return None

    def zero(leaf: torch.Tensor) -> torch.Tensor:
        return leaf.masked_fill(mask.view(1, -1, *([1] * (leaf.dim() - 2))), 0)

    return buffer_func(rnn_state, zero)
