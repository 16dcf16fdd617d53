"""DDPG, and the replay-based actor-critic machinery it shares with TD3 and SAC.

Actions: the replay buffer holds the environment's actions (what the sampler recorded); the
agent's ``normalize_action`` maps them to its [-1, 1] units before they reach the critic.

Time limits (``bootstrap_timelimit``): a transition whose n-step window ended by a time limit
is left out of the critic's loss. Its episode did not terminate, so its target is not the
bare return, but the observation after the time-out is not stored (the next slot holds the
next episode's first observation), so no correct target is at hand. A terminated transition
keeps the target ``return_`` (no bootstrap); every other one bootstraps from its n-th
successor.
"""

from __future__ import annotations

import contextlib
import copy
from collections import namedtuple
from collections.abc import Iterator
from typing import Any

import torch

from rl_replay import TlUniformReplayBuffer, UniformReplayBuffer

from ._pg import check_count, check_number, clip_and_step
from ._replay_algo import ReplayAlgo, check_positive

__all__ = ["DDPG", "DdpgOptInfo"]

# Diagnostics of one optimize_agent call, one float per gradient step (muLoss and muGradNorm
# only on the steps that update the policy): the losses, the gradient norms before clipping,
# and the mean Q-value of the replayed actions (the first critic's).
DdpgOptInfo = namedtuple("DdpgOptInfo", ["muLoss", "qLoss", "muGradNorm", "qGradNorm", "q"])


@contextlib.contextmanager
def frozen(params: list[torch.nn.Parameter]) -> Iterator[None]:
    """Within the block, ``params`` take no gradient: a policy's loss treats the critic as a
    fixed function, and its backward pass skips the critic's weight gradients."""
    for param in params:
        param.requires_grad_(False)
    try:
        yield
    finally:
        for param in params:
            param.requires_grad_(True)


def _masked_mean(x: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
    """Mean of ``x`` over the entries where ``valid`` is 1 (all when None); 0 when none is."""
    if valid is None:
        return x.mean()
    return (x * valid).sum() / valid.sum().clamp(min=1)


class _QpgAlgo(ReplayAlgo):
    """The loop shared by DDPG, TD3 and SAC (``ReplayAlgo``'s): store the sampler's batch in
    the replay buffer, then from iteration ``min_itr_learn`` on take ``updates_per_optimize``
    updates (``round(replay_ratio * sampler batch size / batch_size)``, at least one; in
    async mode ``updates_per_sync``) on batches of ``batch_size`` transitions, moving the
    agent's targets by ``target_update_tau`` every ``target_update_interval`` updates.
    Subclasses define the optimizers and ``_update``.
    """

    OptInfoCls: Any = DdpgOptInfo
    opt_info_fields: tuple[str, ...] = DdpgOptInfo._fields

    def _tell_agent(self, agent: Any) -> None:
        agent.give_min_itr_learn(self.min_itr_learn)

    def _default_replay_cls(self) -> Any:
        """A uniform replay buffer (time-limit form with ``bootstrap_timelimit``)."""
        return TlUniformReplayBuffer if self.bootstrap_timelimit else UniformReplayBuffer

    def _make_optimizer(self, params: list[torch.nn.Parameter], lr: float, what: str) -> Any:
        if not params:
            raise ValueError(f"the agent's {what} is empty: there is nothing to optimize")
        return self.OptimCls(params, lr=lr, **self.optim_kwargs)

    def _step(
        self, optimizer: torch.optim.Optimizer, loss: torch.Tensor, params: Any
    ) -> torch.Tensor:
        """Backpropagate ``loss``, clip the gradient norm of ``params`` (the optimizer's),
        take the optimizer's step; returns the norm before clipping (a tensor)."""
        optimizer.zero_grad()
        loss.backward()
        return clip_and_step(optimizer, params, self.clip_grad_norm)

    def valid(self, samples: Any) -> torch.Tensor | None:
        """0 for transitions cut by a time limit within their n steps (left out of the critic
        loss), 1 for the others; None without ``bootstrap_timelimit`` (all count)."""
        if not self.bootstrap_timelimit:
            return None
        return 1 - samples.timeout_n.to(samples.return_.dtype)

    def bootstrapped(
        self, samples: Any, next_value: torch.Tensor, reward_scale: float = 1
    ) -> torch.Tensor:
        """``reward_scale * return_ + discount**n * (1 - done_n) * next_value``."""
        not_done = 1 - samples.done_n.to(next_value.dtype)
        disc = self.discount**self.n_step_return
        return reward_scale * samples.return_ + not_done * disc * next_value

    # ------------------------------------------------------------------ state

    def optim_state_dict(self) -> dict[str, Any]:
        """A copy of what resuming needs besides the agent and the replay buffer: every
        optimizer's state and ``update_counter`` (loads with ``weights_only``)."""
        state = {name: copy.deepcopy(opt.state_dict()) for name, opt in self._optimizers().items()}
        state["update_counter"] = self.update_counter
        return state

    def load_optim_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what :meth:`optim_state_dict` returned."""
        if not isinstance(state_dict, dict):
            raise TypeError(f"state_dict must be a dict, got {type(state_dict).__name__}")
        optimizers = self._optimizers()
        missing = sorted((optimizers.keys() | {"update_counter"}) - state_dict.keys())
        if missing:
            raise ValueError(
                f"state_dict is missing {', '.join(map(repr, missing))}; expected what "
                f"{type(self).__name__}.optim_state_dict() returns"
            )
        for name, optimizer in optimizers.items():
            optimizer.load_state_dict(copy.deepcopy(state_dict[name]))
        self.update_counter = int(state_dict["update_counter"])


class DDPG(_QpgAlgo):
    """Deep deterministic policy gradient from a replay buffer (rlpyt's arguments and
    defaults; loop, replay and time limits as in ``_QpgAlgo`` and this module's notes).

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
        OptimCls: Any = torch.optim.Adam,
        optim_kwargs: dict[str, Any] | None = None,
        initial_optim_state_dict: dict[str, Any] | None = None,
        clip_grad_norm: float | None = 1e8,
        q_target_clip: float = 1e6,
        n_step_return: int = 1,
        updates_per_sync: int = 1,
        bootstrap_timelimit: bool = True,
        ReplayBufferCls: Any = None,
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
        )
        check_count("policy_update_interval", policy_update_interval)
        check_number("learning_rate", learning_rate, 0)
        check_number("q_learning_rate", q_learning_rate, 0)
        check_positive("q_target_clip", q_target_clip)
        self.policy_update_interval = int(policy_update_interval)
        self.learning_rate = learning_rate
        self.q_learning_rate = q_learning_rate
        self.q_target_clip = q_target_clip
        self.mu_optimizer: Any = None
        self.q_optimizer: Any = None

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

    def _update(self, samples: Any, opt_info: Any) -> None:
        q_loss, q = self.q_loss(samples)
        opt_info.qGradNorm.append(self._step(self.q_optimizer, q_loss, self._q_params))
        opt_info.qLoss.append(q_loss.detach())
        opt_info.q.append(q.mean())
        if self.update_counter % self.policy_update_interval == 0:
            mu_loss = self.mu_loss(samples)
            opt_info.muGradNorm.append(self._step(self.mu_optimizer, mu_loss, self._mu_params))
            opt_info.muLoss.append(mu_loss.detach())

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
        qs = self.critics(self._agent.q(*samples.agent_inputs, action))
        y = self.q_target(samples)
        valid = self.valid(samples)
        loss = sum(_masked_mean(0.5 * (y - q) ** 2, valid) for q in qs)
        return loss, qs[0].detach()

    def mu_loss(self, samples: Any) -> torch.Tensor:
        """``-mean(Q(s, mu(s)))``: the policy climbs the critic (held fixed)."""
        with frozen(self._q_params):
            return -self._agent.q_at_mu(*samples.agent_inputs).mean()
