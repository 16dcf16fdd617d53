"""Deep Q-learning from a replay buffer: n-step returns, double DQN, Huber loss, prioritized
replay, target-network updates, and time-limit truncations that are not treated as terminal."""

from __future__ import annotations

import copy
import os
from collections import namedtuple
from collections.abc import Callable
from typing import Any

import torch

from rl_arrays import namedarraytuple, select_at_indexes
from rl_replay import BaseNStepReturnBuffer

from ._compile import compiled
from ._pg import check_count, check_number, clip_and_step, require_keys
from ._protocols import QAgentLike
from ._replay_algo import ReplayAlgo, check_agent, check_positive
from ._replay_feed import (
    check_q_replay_options,
    is_frame_stack,
    observation_bytes,
    q_replay_cls,
)

__all__ = ["DQN", "DqnOptInfo", "huber_loss"]

# Diagnostics of one optimize_agent call, one float per gradient step: the loss, the gradient
# norm before clipping and the batch's mean absolute TD error (the priority signal; for
# CategoricalDQN the mean KL divergence that serves as its priority).
DqnOptInfo = namedtuple("DqnOptInfo", ["loss", "gradNorm", "tdAbsErr"])

_AGENT_MEMBERS = ("parameters", "device", "target", "update_target", "set_epsilon_itr_min_max")
_MIN_PRIORITY = 1e-6  # a zero priority would never be drawn again
_TARGET_CHUNK_BYTES = 32 * 2**10  # of next observations per forward pass of the target net

# A replayed batch with its regression targets, computed ahead (see DQN._prepare_draw).
TargetedBatch = namedarraytuple("TargetedBatch", ["samples", "y"])


def huber_loss(delta: torch.Tensor, delta_clip: float | None) -> torch.Tensor:
    """Elementwise ``0.5 * delta**2`` within ``|delta| <= delta_clip`` and linear beyond it,
    so no gradient exceeds ``delta_clip``; the plain squared error when ``delta_clip`` is None."""
    if delta_clip is None:
        return 0.5 * delta**2
    # (one fused operation; the same piecewise formula)
    return torch.nn.functional.huber_loss(
        delta, torch.zeros_like(delta), reduction="none", delta=delta_clip
    )


def _huber(
    prediction: torch.Tensor, target: torch.Tensor, delta_clip: float | None
) -> torch.Tensor:
    """``huber_loss(target - prediction, delta_clip)`` in one operation (no difference
    tensor in the graph)."""
    if delta_clip is None:
        return 0.5 * (target - prediction) ** 2
    return torch.nn.functional.huber_loss(prediction, target, reduction="none", delta=delta_clip)


def _select_actions(q: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    """``q[..., action]``: the values of the replayed actions (valid indexes, as stored)."""
    return q.gather(-1, action.long().unsqueeze(-1)).squeeze(-1)


def _mask(flags: torch.Tensor) -> torch.Tensor:
    """Done or timeout flags as a bool mask (they are stored as bools)."""
    return flags if flags.dtype == torch.bool else flags != 0


def n_step_targets(
    target_q: torch.Tensor, return_: torch.Tensor, done_n: torch.Tensor, discount_n: float
) -> torch.Tensor:
    """``y = return_ + discount_n * target_q``, without the bootstrap where an episode ended
    within the n steps (``done_n``)."""
    return return_ + discount_n * target_q.masked_fill(_mask(done_n), 0)


def weighted_mean(
    losses: torch.Tensor,
    errors: torch.Tensor,
    is_weights: torch.Tensor | None,
    timeout_n: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(batch loss, errors)``: the losses importance-weighted by ``is_weights`` (prioritized
    replay), and averaged over the transitions not truncated within n steps (``timeout_n``,
    with time limits), whose errors are zeroed."""
    if is_weights is not None:
        losses = losses * is_weights
    if timeout_n is None:
        return losses.mean(), errors
    truncated = _mask(timeout_n)
    n_kept = (truncated.numel() - truncated.sum()).clamp(min=1)
    loss = losses.masked_fill(truncated, 0).sum() / n_kept
    return loss, errors.masked_fill(truncated, 0)


class DQN(ReplayAlgo[QAgentLike]):
    """DQN trained from a replay buffer (rlpyt's algorithm and argument names).

    Each ``optimize_agent`` appends the sampler's batch to the replay buffer and, from
    iteration ``min_itr_learn`` on, takes ``updates_per_optimize`` gradient steps on batches
    of ``batch_size`` transitions: Huber loss (``delta_clip``) against the n-step target of
    the target network (``double_dqn``: at the online net's argmax), importance-weighted and
    reprioritised with ``prioritized_replay`` (``pri_tree_on_device``: the sum tree on
    ``replay_device`` too, so new priorities are not read back). ``frame_buffer`` stores
    stacked frames once (by default when the observations are stacked frames, as rlpyt
    always did); ``bootstrap_timelimit`` leaves transitions cut by a time limit out of the
    loss. The asynchronous runner's entry points are those of ``ReplayAlgo``. Formulas,
    batching and defaults: the package README, "The Q-learners".
    """

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
        OptimCls: Callable[..., torch.optim.Optimizer] = torch.optim.Adam,
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
        pri_tree_on_device: bool = False,
        ReplayBufferCls: Callable[..., BaseNStepReturnBuffer] | None = None,
        updates_per_sync: int = 1,
        frame_buffer: bool | None = None,
        bootstrap_timelimit: bool = False,
        replay_device: torch.device | str | None = None,
        compile: bool | dict[str, Any] = False,
    ):
        if delta_clip is not None:
            check_positive("delta_clip", delta_clip)
        super().__init__(
            discount=discount,
            batch_size=batch_size,
            min_steps_learn=min_steps_learn,
            replay_size=replay_size,
            replay_ratio=replay_ratio,
            target_update_tau=target_update_tau,
            target_update_interval=target_update_interval,
            n_step_return=n_step_return,
            OptimCls=OptimCls,
            optim_kwargs=optim_kwargs,
            initial_optim_state_dict=initial_optim_state_dict,
            clip_grad_norm=clip_grad_norm,
            updates_per_sync=updates_per_sync,
            bootstrap_timelimit=bootstrap_timelimit,
            ReplayBufferCls=ReplayBufferCls,
            replay_device=replay_device,
            compile=compile,
        )
        check_number("learning_rate", learning_rate, 0)
        eps_steps = check_count("eps_steps", eps_steps, 0)
        check_number("pri_alpha", pri_alpha, 0)
        check_number("pri_beta_init", pri_beta_init, 0)
        check_number("pri_beta_final", pri_beta_final, 0)
        pri_beta_steps = check_count("pri_beta_steps", pri_beta_steps)
        if default_priority is not None:
            check_positive("default_priority", default_priority)
        check_q_replay_options(
            frame_buffer,
            bootstrap_timelimit,
            prioritized_replay,
            pri_tree_on_device,
            replay_device,
            ReplayBufferCls,
        )
        self.delta_clip = delta_clip
        self.learning_rate = learning_rate
        self.eps_steps = eps_steps
        self.double_dqn = bool(double_dqn)
        self.prioritized_replay = bool(prioritized_replay)
        self.pri_alpha = pri_alpha
        self.pri_beta_init = pri_beta_init
        self.pri_beta_final = pri_beta_final
        self.pri_beta_steps = pri_beta_steps
        self.pri_tree_on_device = bool(pri_tree_on_device)
        # New samples enter at the largest priority a clipped TD error can have (rlpyt).
        if default_priority is None:
            default_priority = 1.0 if delta_clip is None else delta_clip
        self.default_priority = default_priority
        self.frame_buffer = None if frame_buffer is None else bool(frame_buffer)
        self.optimizer: torch.optim.Optimizer | None = None
        self.pri_beta = pri_beta_init if self.prioritized_replay else None

    def _default_adam_kwargs(self) -> dict[str, Any]:
        # rlpyt's epsilon for DQN's Adam, and the fused implementation.
        return {"eps": 0.01 / self.batch_size, "fused": True}

    # ------------------------------------------------------------------ set-up

    def _check_agent(self, agent: object) -> None:
        check_agent(agent, type(self).__name__, _AGENT_MEMBERS, "QAgentLike")
        if getattr(agent, "recurrent", False):
            raise TypeError(
                f"{type(self).__name__} takes a feed-forward agent; use R2D1 for a recurrent one"
            )

    def _tell_agent(self, agent: QAgentLike) -> None:
        """The epsilon schedule, in sampler iterations."""
        agent.set_epsilon_itr_min_max(self.min_itr_learn, max(1, self.eps_steps // self.sampler_bs))

    def _make_optimizers(self) -> None:
        """The optimizer over the agent's parameters, and the importance-weight schedule."""
        self._params = list(self._agent.parameters())
        if not self._params:
            raise ValueError("agent.parameters() is empty: there is nothing to optimize")
        self.optimizer = self.OptimCls(self._params, lr=self.learning_rate, **self.optim_kwargs)
        if self.prioritized_replay:
            self.pri_beta_itr = max(1, self.pri_beta_steps // self.sampler_bs)

    def _optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"optimizer": self._optimizer}

    def _replay_kwargs(self) -> dict[str, Any]:
        if not self.prioritized_replay:
            return {}
        kwargs = dict(
            alpha=self.pri_alpha, beta=self.pri_beta_init, default_priority=self.default_priority
        )
        if self.pri_tree_on_device:
            kwargs["tree_on_device"] = True
        return kwargs

    def _stores_frames(self, example: Any) -> bool:
        """``frame_buffer``, chosen when None: stacked frames (rlpyt's Atari DQN), unless
        time limits need their own buffer or the replay is on a device (``replay_device``:
        whole observations)."""
        if self.frame_buffer is None:
            stacked = is_frame_stack(example.observation)
            host = self.replay_device is None
            self.frame_buffer = stacked and host and not self.bootstrap_timelimit
        return self.frame_buffer

    def _default_replay_cls(self, example: Any) -> type[BaseNStepReturnBuffer]:
        frames = self._stores_frames(example)
        return q_replay_cls(self.prioritized_replay, frames, self.bootstrap_timelimit)

    # ------------------------------------------------------------------ training

    def _compile_losses(self, options: dict[str, Any] | None) -> None:
        self._loss_fn = compiled(self._loss_and_priorities, options)

    def _update_step(self, variant: tuple[bool, ...], batch: Any) -> tuple[Any, ...]:
        """One gradient step on a replayed batch (and the target's update when ``variant``
        says so): ``(loss, grad norm, mean |TD error|, priorities)``."""
        (update_target,) = variant
        for param in self._params:  # (the optimizer's zero_grad, without its overhead)
            param.grad = None
        loss, td_abs_errors, priorities = self._loss_fn(batch)
        loss.backward()
        grad_norm = self._clip_and_step()
        if update_target:
            self._agent.update_target(self.target_update_tau)
        return loss.detach(), grad_norm, td_abs_errors.mean(), priorities

    def _loss_and_priorities(self, batch: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if isinstance(batch, TargetedBatch):
            loss, td_abs_errors = self._loss_given_targets(batch.samples, batch.y)
        else:
            loss, td_abs_errors = self.loss(batch)
        return loss, td_abs_errors, td_abs_errors

    def _record(self, variant: tuple[bool, ...], outputs: tuple[Any, ...], opt_info: Any) -> None:
        """New priorities with prioritized replay (written under the buffer's lock: in async
        mode the copier appends meanwhile); the diagnostics appended as 0-dim tensors
        (``optimize_agent`` reads them together: one wait for the device per call)."""
        loss, grad_norm, td_abs_error, priorities = outputs
        if self.prioritized_replay:
            priorities = priorities.clamp(min=_MIN_PRIORITY)
            if not self.pri_tree_on_device:
                priorities = priorities.cpu().numpy()
            self._replay_buffer.update_batch_priorities(priorities)
        opt_info.loss.append(loss)
        opt_info.gradNorm.append(grad_norm)
        opt_info.tdAbsErr.append(td_abs_error)

    def loss(self, samples: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """``(loss, |TD error| per transition)`` on a replayed batch (leading dim [B], tensors
        on the agent's device); the loss has grad, the errors (clipped at ``delta_clip``,
        zero where masked) do not."""
        with torch.no_grad():
            y = self._targets(samples)
        return self._loss_given_targets(samples, y)

    def _targets(self, samples: Any) -> torch.Tensor:
        """The regression targets ``y = return_ + discount**n_step_return * Q_target(s',
        a')``, without the bootstrap where an episode ended within the n steps. Call
        without grad."""
        target_q = self.target_q(samples.target_inputs)
        discount_n = self.discount**self.n_step_return
        return n_step_targets(target_q, samples.return_, samples.done_n, discount_n)

    def _loss_given_targets(
        self, samples: Any, y: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``loss``, given the batch's targets ``y``."""
        q = _select_actions(self._agent(*samples.agent_inputs), samples.action)
        with torch.no_grad():
            td_abs_errors = (y - q.detach()).abs_()
            if self.delta_clip is not None:
                td_abs_errors.clamp_(max=self.delta_clip)
        return self._weighted_mean(_huber(q, y, self.delta_clip), td_abs_errors, samples)

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
        """:func:`weighted_mean` with this algorithm's replay: prioritized, time limits."""
        is_weights = samples.is_weights if self.prioritized_replay else None
        timeout_n = samples.timeout_n if self.bootstrap_timelimit else None
        return weighted_mean(losses, errors, is_weights, timeout_n)

    def _targets_per_draw(self) -> bool:
        """Whether the targets of a whole draw of replayed batches are computed at once,
        before its updates (a few large forward passes of the target network instead of
        one small one per update): where they depend on the target network alone (no
        double DQN), which then stays the same over the draw, and the loss is this
        class's own."""
        return (
            not self.double_dqn
            and type(self).loss is DQN.loss
            and type(self)._targets is DQN._targets
            and type(self).target_q is DQN.target_q
        )

    def _updates_per_draw(self) -> int:
        if not self._targets_per_draw():
            return super()._updates_per_draw()
        # Up to the update after which the target network changes.
        return self.target_update_interval - self.update_counter % self.target_update_interval

    def _prepare_draw(self, draw: Any, batch_B: int) -> Any:
        """With ``_targets_per_draw``: the draw with its targets, computed in chunks of
        whole batches up to ``_TARGET_CHUNK_BYTES`` of observations (larger passes run no
        faster, their activations spilling out of the caches)."""
        if not self._targets_per_draw():
            return draw
        row_bytes = observation_bytes(self._replay_buffer)
        rows = batch_B * max(1, _TARGET_CHUNK_BYTES // (row_bytes * batch_B))
        with torch.no_grad():
            y = torch.cat(
                [self._targets(draw[i : i + rows]) for i in range(0, len(draw.return_), rows)]
            )
        return TargetedBatch(samples=draw, y=y)

    def update_itr_hyperparams(self, itr: int) -> None:
        """Anneal the importance-sampling exponent beta linearly from ``pri_beta_init`` at
        ``min_itr_learn`` to ``pri_beta_final`` after ``pri_beta_steps`` sampled steps."""
        if not self.prioritized_replay:
            return
        span = max(1, self.pri_beta_itr - self.min_itr_learn)
        progress = min(1.0, max(0, itr - self.min_itr_learn) / span)
        self.pri_beta = self.pri_beta_init + progress * (self.pri_beta_final - self.pri_beta_init)
        self._replay_buffer.set_beta(self.pri_beta)

    def _clip_and_step(self) -> torch.Tensor:
        """Clip the gradient norm, take an optimizer step; returns the norm before clipping."""
        return clip_and_step(self._optimizer, self._params, self.clip_grad_norm)

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
            self._restart_steps()
            return
        require_keys(state_dict, ("optimizer", "update_counter", "pri_beta"))
        self._optimizer.load_state_dict(copy.deepcopy(state_dict["optimizer"]))
        self._restart_steps()
        self.update_counter = int(state_dict["update_counter"])
        if self.prioritized_replay and state_dict["pri_beta"] is not None:
            self.pri_beta = float(state_dict["pri_beta"])
            if self.replay_buffer is not None:
                self.replay_buffer.set_beta(self.pri_beta)

    def load_replay(self, path: str | os.PathLike[str]) -> None:
        """Restore the replay buffer saved by :meth:`save_replay` (same settings)."""
        super().load_replay(path)
        if self.prioritized_replay and self.pri_beta is not None:
            self._replay_buffer.set_beta(self.pri_beta)

    @property
    def _optimizer(self) -> torch.optim.Optimizer:
        return self._require(self.optimizer)
