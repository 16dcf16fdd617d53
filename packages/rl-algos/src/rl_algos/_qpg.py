"""The replay-based actor-critic machinery shared by DDPG, TD3 and SAC.

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
from collections.abc import Iterator, Sequence
from typing import Any, TypeVar

import torch

from rl_replay import BaseNStepReturnBuffer, TlUniformReplayBuffer, UniformReplayBuffer

from ._pg import clip_and_step
from ._protocols import DdpgAgentLike, SacAgentLike
from ._replay_algo import ReplayAlgo

__all__ = ["DdpgOptInfo", "QpgAlgo", "frozen", "masked_mean"]

# Diagnostics of one optimize_agent call, one float per gradient step (muLoss and muGradNorm
# only on the steps that update the policy): the losses, the gradient norms before clipping,
# and the mean Q-value of the replayed actions (the first critic's).
DdpgOptInfo = namedtuple("DdpgOptInfo", ["muLoss", "qLoss", "muGradNorm", "qGradNorm", "q"])

QpgAgentT = TypeVar("QpgAgentT", bound=DdpgAgentLike | SacAgentLike)


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


def masked_mean(x: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
    """Mean of ``x`` over the entries where ``valid`` is 1 (all when None); 0 when none is."""
    if valid is None:
        return x.mean()
    return (x * valid).sum() / valid.sum().clamp(min=1)


class QpgAlgo(ReplayAlgo[QpgAgentT]):
    """The loop shared by DDPG, TD3 and SAC (``ReplayAlgo``'s): store the sampler's batch in
    the replay buffer, then from iteration ``min_itr_learn`` on take ``updates_per_optimize``
    updates (``round(replay_ratio * sampler batch size / batch_size)``, at least one; in
    async mode ``updates_per_sync``) on batches of ``batch_size`` transitions, moving the
    agent's targets by ``target_update_tau`` every ``target_update_interval`` updates.
    Subclasses define the optimizers and ``_update``.
    """

    OptInfoCls: Any = DdpgOptInfo
    opt_info_fields: tuple[str, ...] = DdpgOptInfo._fields

    def _tell_agent(self, agent: QpgAgentT) -> None:
        agent.give_min_itr_learn(self.min_itr_learn)

    def _default_replay_cls(self, example: Any) -> type[BaseNStepReturnBuffer]:
        """A uniform replay buffer (time-limit form with ``bootstrap_timelimit``)."""
        return TlUniformReplayBuffer if self.bootstrap_timelimit else UniformReplayBuffer

    def _make_optimizer(
        self, params: Sequence[torch.Tensor], lr: float, what: str
    ) -> torch.optim.Optimizer:
        if not params:
            raise ValueError(f"the agent's {what} is empty: there is nothing to optimize")
        return self.OptimCls(params, lr=lr, **self.optim_kwargs)

    def _step(
        self, optimizer: torch.optim.Optimizer, loss: torch.Tensor, params: Sequence[torch.Tensor]
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
        state: dict[str, Any] = {
            name: copy.deepcopy(opt.state_dict()) for name, opt in self._optimizers().items()
        }
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
        self._restart_steps()
        self.update_counter = int(state_dict["update_counter"])
