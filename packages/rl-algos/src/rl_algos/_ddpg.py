"""DDPG (rlpyt's arguments and defaults); the replay loop, actions and time limits it shares
with TD3 and SAC are ``_qpg``'s."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from rl_replay import BaseNStepReturnBuffer

from ._compile import compiled
from ._pg import check_count, check_number
from ._protocols import DdpgAgentLike
from ._qpg import DdpgOptInfo, QpgAlgo, frozen, masked_mean
from ._replay_algo import check_positive

__all__ = ["DDPG", "DdpgOptInfo"]


class DDPG(QpgAlgo[DdpgAgentLike]):
    """Deep deterministic policy gradient from a replay buffer (rlpyt's arguments and
    defaults; loop, replay and time limits as in ``QpgAlgo`` and ``_qpg``'s notes).

    Each update: the critic regresses on ``y = clip(return_ + discount**n * (1 - done_n) *
    Q_target(s', mu_target(s')), +-q_target_clip)`` with loss ``0.5 * (y - Q(s, a))**2``
    (``q_loss``); every ``policy_update_interval`` updates the policy ascends
    ``Q(s, mu(s))`` (``mu_loss``). The agent meets ``DdpgAgentLike``. Optimizers: ``OptimCls`` with ``learning_rate`` for mu and
    ``q_learning_rate`` for Q, gradient norms clipped at ``clip_grad_norm``.
    """

    agent_members = (
        "device",
        "q",
        "q_at_mu",
        "target_q_at_mu",
        "mu_parameters",
        "q_parameters",
        "normalize_action",
        "update_target",
        "give_min_itr_learn",
    )
    agent_protocol = "DdpgAgentLike"

    def __init__(
        self,
        discount: float = 0.99,
        batch_size: int = 64,
        min_steps_learn: int = int(1e4),
        replay_size: int = int(1e6),
        replay_ratio: float = 64,
        target_update_tau: float = 0.01,
        target_update_interval: int = 1,
        policy_update_interval: int = 1,
        learning_rate: float = 1e-4,
        q_learning_rate: float = 1e-3,
        OptimCls: Callable[..., torch.optim.Optimizer] = torch.optim.Adam,
        optim_kwargs: dict[str, Any] | None = None,
        initial_optim_state_dict: dict[str, Any] | None = None,
        clip_grad_norm: float | None = 1e8,
        q_target_clip: float = 1e6,
        n_step_return: int = 1,
        updates_per_sync: int = 1,
        bootstrap_timelimit: bool = True,
        ReplayBufferCls: Callable[..., BaseNStepReturnBuffer] | None = None,
        replay_device: torch.device | str | None = None,
        compile: bool | dict[str, Any] = False,
    ):
        super().__init__(
            discount=discount,
            batch_size=batch_size,
            min_steps_learn=min_steps_learn,
            replay_size=replay_size,
            replay_ratio=replay_ratio,
            target_update_tau=target_update_tau,
            target_update_interval=target_update_interval,
            OptimCls=OptimCls,
            optim_kwargs=optim_kwargs,
            initial_optim_state_dict=initial_optim_state_dict,
            clip_grad_norm=clip_grad_norm,
            n_step_return=n_step_return,
            updates_per_sync=updates_per_sync,
            bootstrap_timelimit=bootstrap_timelimit,
            ReplayBufferCls=ReplayBufferCls,
            replay_device=replay_device,
            compile=compile,
        )
        policy_update_interval = check_count("policy_update_interval", policy_update_interval)
        check_number("learning_rate", learning_rate, 0)
        check_number("q_learning_rate", q_learning_rate, 0)
        check_positive("q_target_clip", q_target_clip)
        self.policy_update_interval = policy_update_interval
        self.learning_rate = learning_rate
        self.q_learning_rate = q_learning_rate
        self.q_target_clip = q_target_clip
        self.mu_optimizer: torch.optim.Optimizer | None = None
        self.q_optimizer: torch.optim.Optimizer | None = None

    def _make_optimizers(self) -> None:
        self._mu_params = list(self._agent.mu_parameters())
        self._q_params = list(self._agent.q_parameters())
        self.mu_optimizer = self._make_optimizer(self._mu_params, self.learning_rate, "mu")
        self.q_optimizer = self._make_optimizer(self._q_params, self.q_learning_rate, "critic")

    def _optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {
            "mu_optimizer": self._require(self.mu_optimizer),
            "q_optimizer": self._require(self.q_optimizer),
        }

    def _compile_losses(self, options: dict[str, Any] | None) -> None:
        self._q_loss_fn = compiled(self.q_loss, options)
        self._mu_loss_fn = compiled(self._mu_loss, options)

    def _variant(self, update_target: bool) -> tuple[bool, ...]:
        """``(update the policy, update the targets)``."""
        return self.update_counter % self.policy_update_interval == 0, update_target

    def _update_step(self, variant: tuple[bool, ...], batch: Any) -> tuple[Any, ...]:
        """The critic's step, the policy's and the targets' when ``variant`` says so:
        ``(q loss, q grad norm, mean q[, mu loss, mu grad norm])``."""
        update_policy, update_target = variant
        q_loss, q = self._q_loss_fn(batch)
        q_grad_norm = self._step(self._require(self.q_optimizer), q_loss, self._q_params)
        outputs: tuple[Any, ...] = (q_loss.detach(), q_grad_norm, q.mean())
        if update_policy:
            with frozen(self._q_params):
                mu_loss = self._mu_loss_fn(batch)
            mu_optimizer = self._require(self.mu_optimizer)
            outputs += (mu_loss.detach(), self._step(mu_optimizer, mu_loss, self._mu_params))
        if update_target:
            self._agent.update_target(self.target_update_tau)
        return outputs

    def _record(self, variant: tuple[bool, ...], outputs: tuple[Any, ...], opt_info: Any) -> None:
        fields = ("qLoss", "qGradNorm", "q", "muLoss", "muGradNorm")
        for name, value in zip(fields, outputs, strict=False):
            getattr(opt_info, name).append(value)

    def critics(self, q: Any) -> tuple[torch.Tensor, ...]:
        """The critic values in the agent's ``q`` output (DDPG: its single critic)."""
        return (q,)

    def target_value(self, target_inputs: Any) -> torch.Tensor:
        """The value bootstrapped from: ``Q_target(s', mu_target(s'))``. Call without grad."""
        return self._agent.target_q_at_mu(*target_inputs)

    def q_target(self, samples: Any) -> torch.Tensor:
        """The critic's regression target ``y``, clipped at ``q_target_clip``, no grad."""
        with torch.no_grad():
            y = self.bootstrapped(samples, self.target_value(samples.target_inputs))
            return torch.clamp(y, -self.q_target_clip, self.q_target_clip)

    def q_loss(self, samples: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """``(loss, Q(s, a) of the first critic, detached)`` on a replayed batch (leading
        dim [B], on the agent's device): ``0.5 * (y - Q)**2`` averaged over the valid
        transitions, summed over the critics."""
        action = self._agent.normalize_action(samples.action)
        # (observation, prev_action, prev_reward)
        inputs: tuple[Any, Any, Any] = samples.agent_inputs
        qs = self.critics(self._agent.q(*inputs, action))
        y = self.q_target(samples)
        valid = self.valid(samples)
        losses = [masked_mean(0.5 * (y - q) ** 2, valid) for q in qs]
        loss = sum(losses[1:], losses[0])
        return loss, qs[0].detach()

    def mu_loss(self, samples: Any) -> torch.Tensor:
        """``-mean(Q(s, mu(s)))``: the policy climbs the critic (held fixed)."""
        with frozen(self._q_params):
            return self._mu_loss(samples)

    def _mu_loss(self, samples: Any) -> torch.Tensor:
        """``mu_loss`` with the critic's parameters frozen by the caller (a compiled function
        cannot change them)."""
        return -self._agent.q_at_mu(*samples.agent_inputs).mean()
