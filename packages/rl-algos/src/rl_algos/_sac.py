"""SAC: soft actor-critic with twin critics, a tanh-squashed Gaussian policy and a fixed or
learned temperature, from a replay buffer (loop, replay and time limits as in ``_qpg``)."""

from __future__ import annotations

import math
from collections import namedtuple
from collections.abc import Callable
from typing import Any

import torch

from rl_arrays import BatchSpec
from rl_replay import BaseNStepReturnBuffer

from ._compile import compiled
from ._pg import check_number, clip_and_step
from ._protocols import SacAgentLike
from ._qpg import QpgAlgo, frozen, masked_mean
from ._replay_algo import check_positive
from ._replay_feed import example_field

__all__ = ["SAC", "SacOptInfo"]

# Diagnostics of one optimize_agent call, one float per update: the critics' and the policy's
# losses, gradient norms before clipping (both critics together), the batch means of the
# replayed actions' Q-values and of the policy's mean and log_std (before the squash), and
# the temperature alpha used in the update.
SacOptInfo = namedtuple(
    "SacOptInfo",
    [
        "q1Loss",
        "q2Loss",
        "piLoss",
        "qGradNorm",
        "piGradNorm",
        "q1",
        "q2",
        "piMu",
        "piLogStd",
        "alpha",
    ],
)

_LOG_2PI = math.log(2 * math.pi)


class SAC(QpgAlgo[SacAgentLike]):
    """Soft actor-critic (rlpyt's arguments and defaults; the agent meets ``SacAgentLike``).

    Each update, on one replayed batch: both critics regress on the soft target
    ``min(Q1_target, Q2_target)(s', a') - alpha * log pi(a'|s')`` (with ``reward_scale``);
    the policy minimises ``alpha * log pi - min(Q1, Q2) - log prior`` (``action_prior``);
    alpha is ``fixed_alpha`` or learned towards ``target_entropy`` ("auto": minus the action
    dim). One ``learning_rate`` for all. ``optim_state_dict`` holds the three optimizers,
    ``log_alpha`` and ``update_counter``, so a resumed run continues exactly. Formulas: the
    package README, "The Q-value policy-gradient family".
    """

    OptInfoCls: Any = SacOptInfo
    opt_info_fields: tuple[str, ...] = SacOptInfo._fields
    agent_members = (
        "device",
        "pi",
        "q",
        "target_q",
        "pi_parameters",
        "q_parameters",
        "normalize_action",
        "update_target",
        "give_min_itr_learn",
    )
    agent_protocol = "SacAgentLike"

    def __init__(
        self,
        discount: float = 0.99,
        batch_size: int = 256,
        min_steps_learn: int = int(1e4),
        replay_size: int = int(1e6),
        replay_ratio: float = 256,
        target_update_tau: float = 0.005,
        target_update_interval: int = 1,
        learning_rate: float = 3e-4,
        fixed_alpha: float | None = None,
        OptimCls: Callable[..., torch.optim.Optimizer] = torch.optim.Adam,
        optim_kwargs: dict[str, Any] | None = None,
        initial_optim_state_dict: dict[str, Any] | None = None,
        action_prior: str = "uniform",
        reward_scale: float = 1,
        target_entropy: float | str = "auto",
        clip_grad_norm: float | None = 1e9,
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
        check_number("learning_rate", learning_rate, 0)
        if fixed_alpha is not None:
            check_positive("fixed_alpha", fixed_alpha)
        if action_prior not in ("uniform", "gaussian"):
            raise ValueError(f'action_prior must be "uniform" or "gaussian", got {action_prior!r}')
        check_number("reward_scale", reward_scale)
        if target_entropy != "auto":
            check_number("target_entropy", target_entropy)
        self.learning_rate = learning_rate
        self.fixed_alpha = fixed_alpha
        self.action_prior = action_prior
        self.reward_scale = reward_scale
        self.target_entropy = target_entropy
        self.pi_optimizer: torch.optim.Optimizer | None = None
        self.q_optimizer: torch.optim.Optimizer | None = None
        self.alpha_optimizer: torch.optim.Optimizer | None = None
        self.log_alpha: torch.Tensor | None = None

    def _setup(
        self,
        agent: SacAgentLike,
        n_itr: int,
        batch_spec: BatchSpec,
        mid_batch_reset: bool,
        examples: Any,
        world_size: int,
        async_: bool,
    ) -> None:
        """As ``DDPG``'s; also sizes the entropy target from the examples' action."""
        super()._setup(agent, n_itr, batch_spec, mid_batch_reset, examples, world_size, async_)
        action_dim = math.prod(torch.as_tensor(example_field(examples, "action")).shape)
        auto = self.target_entropy == "auto"
        self._target_entropy = -float(action_dim) if auto else float(self.target_entropy)

    def _make_optimizers(self) -> None:
        self._pi_params = list(self._agent.pi_parameters())
        self._q_params = list(self._agent.q_parameters())
        self.pi_optimizer = self._make_optimizer(self._pi_params, self.learning_rate, "pi")
        self.q_optimizer = self._make_optimizer(self._q_params, self.learning_rate, "critic")
        log_alpha = 0.0 if self.fixed_alpha is None else math.log(self.fixed_alpha)
        self.log_alpha = torch.tensor([log_alpha], device=self._device)
        if self.fixed_alpha is None:
            self.log_alpha.requires_grad_(True)
            self.alpha_optimizer = self._make_optimizer([self.log_alpha], self.learning_rate, "")

    def _optimizers(self) -> dict[str, torch.optim.Optimizer]:
        optimizers = {
            "pi_optimizer": self._require(self.pi_optimizer),
            "q_optimizer": self._require(self.q_optimizer),
        }
        if self.alpha_optimizer is not None:
            optimizers["alpha_optimizer"] = self.alpha_optimizer
        return optimizers

    @property
    def alpha(self) -> float:
        """The current temperature."""
        return math.exp(self._require(self.log_alpha).item())

    def _compile_losses(self, options: dict[str, Any] | None) -> None:
        self._q_loss_fn = compiled(self.q_loss, options)
        self._pi_loss_fn = compiled(self._policy_loss, options)

    def _update_step(self, variant: tuple[bool, ...], batch: Any) -> tuple[Any, ...]:
        """The critics' step, the policy's and temperature's, the targets' when ``variant``
        says so; returns the diagnostics in ``SacOptInfo``'s order."""
        (update_target,) = variant
        alpha = self._require(self.log_alpha).detach().exp()
        q1_loss, q2_loss, q1, q2 = self._q_loss_fn(batch, alpha)
        q_optimizer = self._require(self.q_optimizer)
        q_grad_norm = self._step(q_optimizer, q1_loss + q2_loss, self._q_params)
        with frozen(self._q_params):
            pi_loss, log_pi, dist_info = self._pi_loss_fn(batch, alpha)
        pi_grad_norm = self._pi_and_alpha_step(pi_loss, log_pi)
        if update_target:
            self._agent.update_target(self.target_update_tau)
        return (
            q1_loss.detach(),
            q2_loss.detach(),
            pi_loss.detach(),
            q_grad_norm,
            pi_grad_norm,
            q1.mean(),
            q2.mean(),
            dist_info.mean.detach().mean(),
            dist_info.log_std.detach().mean(),
            alpha.reshape(()),
        )

    def _record(self, variant: tuple[bool, ...], outputs: tuple[Any, ...], opt_info: Any) -> None:
        for values, value in zip(opt_info, outputs, strict=True):
            values.append(value)

    def _policy_loss(self, samples: Any, alpha: torch.Tensor) -> tuple[torch.Tensor, Any, Any]:
        """``(pi_loss, log_pi, dist_info)`` of a fresh policy action at the batch's
        observations, the critics frozen by the caller (a compiled function cannot)."""
        action, log_pi, dist_info = self._agent.pi(*samples.agent_inputs)
        return self._pi_loss(samples, action, log_pi, alpha), log_pi, dist_info

    def _pi_and_alpha_step(self, pi_loss: torch.Tensor, log_pi: torch.Tensor) -> torch.Tensor:
        """The policy's step and the temperature's, from one backward pass: the temperature's
        loss reads ``log_pi`` detached and the policy's loss alpha detached, so each gets
        the gradient its own loss alone would give. Returns the policy's gradient norm."""
        pi_optimizer, alpha_optimizer = self._require(self.pi_optimizer), self.alpha_optimizer
        if alpha_optimizer is None:
            return self._step(pi_optimizer, pi_loss, self._pi_params)
        log_alpha = self._require(self.log_alpha)
        alpha_loss = -(log_alpha * (log_pi.detach() + self._target_entropy)).mean()
        pi_optimizer.zero_grad()
        alpha_optimizer.zero_grad()
        (pi_loss + alpha_loss).backward()
        pi_grad_norm = clip_and_step(pi_optimizer, self._pi_params, self.clip_grad_norm)
        alpha_optimizer.step()
        return pi_grad_norm

    def q_target(self, samples: Any, alpha: torch.Tensor) -> torch.Tensor:
        """The critics' target ``y`` (no grad): the soft value of s' under the target critics
        and a fresh policy action, bootstrapped onto the scaled return."""
        with torch.no_grad():
            next_action, next_log_pi, _ = self._agent.pi(*samples.target_inputs)
            # (observation, prev_action, prev_reward)
            target_inputs: tuple[Any, Any, Any] = samples.target_inputs
            q1, q2 = self._agent.target_q(*target_inputs, next_action)
            next_value = torch.minimum(q1, q2) - alpha * next_log_pi
            return self.bootstrapped(samples, next_value, self.reward_scale)

    def q_loss(self, samples: Any, alpha: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """``(q1_loss, q2_loss, q1, q2)`` on a replayed batch; the Q-values detached."""
        action = self._agent.normalize_action(samples.action)
        # (observation, prev_action, prev_reward)
        inputs: tuple[Any, Any, Any] = samples.agent_inputs
        q1, q2 = self._agent.q(*inputs, action)
        y = self.q_target(samples, alpha)
        valid = self.valid(samples)
        q1_loss = masked_mean(0.5 * (y - q1) ** 2, valid)
        q2_loss = masked_mean(0.5 * (y - q2) ** 2, valid)
        return q1_loss, q2_loss, q1.detach(), q2.detach()

    def pi_loss(
        self, samples: Any, action: torch.Tensor, log_pi: torch.Tensor, alpha: torch.Tensor
    ) -> torch.Tensor:
        """``mean(alpha * log_pi - min(Q1, Q2)(s, action) - log prior(action))`` for the
        policy's reparameterised ``action`` (grad flows through it into the policy; the
        critics are held fixed)."""
        with frozen(self._q_params):
            return self._pi_loss(samples, action, log_pi, alpha)

    def _pi_loss(
        self, samples: Any, action: torch.Tensor, log_pi: torch.Tensor, alpha: torch.Tensor
    ) -> torch.Tensor:
        # (observation, prev_action, prev_reward)
        inputs: tuple[Any, Any, Any] = samples.agent_inputs
        q1, q2 = self._agent.q(*inputs, action)
        loss = alpha * log_pi - torch.minimum(q1, q2)
        if self.action_prior == "gaussian":
            loss = loss - self.prior_log_prob(action)
        return loss.mean()

    def prior_log_prob(self, action: torch.Tensor) -> torch.Tensor | float:
        """The action prior's log-density: 0 for "uniform" (a constant does not change the
        gradient), the standard normal's summed over dims for "gaussian"."""
        if self.action_prior == "uniform":
            return 0.0
        return -0.5 * (action**2 + _LOG_2PI).sum(dim=-1)

    def optim_state_dict(self) -> dict[str, Any]:
        """The optimizers, ``update_counter`` and ``log_alpha`` (a copy)."""
        state = super().optim_state_dict()
        state["log_alpha"] = self._require(self.log_alpha).detach().clone()
        return state

    def load_optim_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what :meth:`optim_state_dict` returned."""
        if isinstance(state_dict, dict) and "log_alpha" not in state_dict:
            raise ValueError(
                "state_dict is missing 'log_alpha'; expected what SAC.optim_state_dict() returns"
            )
        super().load_optim_state_dict(state_dict)
        with torch.no_grad():  # in place: the temperature's optimizer holds this tensor
            self._require(self.log_alpha).copy_(torch.as_tensor(state_dict["log_alpha"]).reshape(1))
