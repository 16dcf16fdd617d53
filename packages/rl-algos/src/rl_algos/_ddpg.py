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
import os
from collections import namedtuple
from collections.abc import Iterator
from typing import Any

import torch

from rl_arrays import buffer_to, numpify_buffer, torchify_buffer
from rl_replay import TlUniformReplayBuffer, UniformReplayBuffer

from ._dqn import DQN, _check_positive, check_agent
from ._pg import check_count, check_number, clip_and_step

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


class _QpgAlgo:
    """The loop shared by DDPG, TD3 and SAC: store the sampler's batch in the replay buffer,
    then from iteration ``min_itr_learn`` on take ``updates_per_optimize`` updates
    (``round(replay_ratio * sampler batch size / batch_size)``, at least one) on batches of
    ``batch_size`` transitions, moving the agent's targets by ``target_update_tau`` every
    ``target_update_interval`` updates. Subclasses define the optimizers and ``_update``.
    """

    bootstrap_value = False  # the sampler need not record a bootstrap value
    OptInfoCls: Any = DdpgOptInfo
    opt_info_fields: tuple[str, ...] = DdpgOptInfo._fields
    agent_members: tuple[str, ...] = ()
    agent_protocol = ""

    def __init__(
        self,
        discount: float,
        batch_size: int,
        min_steps_learn: int,
        replay_size: int,
        replay_ratio: float,
        target_update_tau: float,
        target_update_interval: int,
        OptimCls: Any,
        optim_kwargs: dict[str, Any] | None,
        initial_optim_state_dict: dict[str, Any] | None,
        clip_grad_norm: float | None,
        n_step_return: int,
        updates_per_sync: int,
        bootstrap_timelimit: bool,
        ReplayBufferCls: Any,
    ):
        check_number("discount", discount, 0, 1)
        check_count("batch_size", batch_size)
        check_count("min_steps_learn", min_steps_learn, 0)
        check_count("replay_size", replay_size)
        _check_positive("replay_ratio", replay_ratio)
        _check_positive("target_update_tau", target_update_tau)
        check_number("target_update_tau", target_update_tau, 0, 1)
        check_count("target_update_interval", target_update_interval)
        if not callable(OptimCls):
            raise ValueError(f"OptimCls must be an optimizer class, got {OptimCls!r}")
        if optim_kwargs is not None and not isinstance(optim_kwargs, dict):
            raise ValueError(f"optim_kwargs must be a dict or None, got {optim_kwargs!r}")
        if clip_grad_norm is not None:
            check_number("clip_grad_norm", clip_grad_norm, 0)
        check_count("n_step_return", n_step_return)
        check_count("updates_per_sync", updates_per_sync)
        if ReplayBufferCls is not None and not callable(ReplayBufferCls):
            raise ValueError(
                f"ReplayBufferCls must be a replay buffer class, got {ReplayBufferCls!r}"
            )
        self.discount = discount
        self.batch_size = int(batch_size)
        self.min_steps_learn = int(min_steps_learn)
        self.replay_size = int(replay_size)
        self.replay_ratio = replay_ratio
        self.target_update_tau = target_update_tau
        self.target_update_interval = int(target_update_interval)
        self.OptimCls = OptimCls
        if optim_kwargs is None and OptimCls in (torch.optim.Adam, torch.optim.AdamW):
            optim_kwargs = {"fused": True}  # one kernel for all parameters
        self.optim_kwargs = dict(optim_kwargs or {})
        self.initial_optim_state_dict = initial_optim_state_dict
        self.clip_grad_norm = clip_grad_norm
        self.n_step_return = int(n_step_return)
        self.updates_per_sync = int(updates_per_sync)
        self.bootstrap_timelimit = bool(bootstrap_timelimit)
        self.ReplayBufferCls = ReplayBufferCls
        self.agent: Any = None
        self.replay_buffer: Any = None
        self.update_counter = 0

    # The replay data and its checks are DQN's: the same fields (observation, action, reward,
    # done, and timeout with bootstrap_timelimit), and the same condition for a first batch.
    examples_to_buffer = DQN.examples_to_buffer
    samples_to_buffer = DQN.samples_to_buffer
    _steps_to_first_batch = DQN._steps_to_first_batch
    _check_learning_start = DQN._check_learning_start

    # ------------------------------------------------------------------ set-up

    def initialize(
        self,
        agent: Any,
        n_itr: int,
        batch_spec: Any,
        mid_batch_reset: bool = False,
        examples: Any = None,
        world_size: int = 1,
        rank: int = 0,
    ) -> None:
        """Keep the agent, size the run from ``batch_spec`` (``updates_per_optimize``,
        ``min_itr_learn``, told to the agent), build the replay buffer from ``examples`` and
        the optimizers. With ``mid_batch_reset=False`` a wait-reset sampler's blank steps
        after a done are replayed as terminal transitions with zero reward (as in DQN)."""
        check_agent(agent, type(self).__name__, self.agent_members, self.agent_protocol)
        check_count("n_itr", n_itr)
        check_count("world_size", world_size)
        check_count("rank", rank, 0)
        T, B = getattr(batch_spec, "T", None), getattr(batch_spec, "B", None)
        check_count("batch_spec.T", T)
        check_count("batch_spec.B", B)
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
        agent.give_min_itr_learn(self.min_itr_learn)
        self.initialize_replay_buffer(examples, batch_spec)
        self._check_learning_start(T)
        self.optim_initialize(rank)

    def initialize_replay_buffer(self, examples: Any, batch_spec: Any) -> None:
        """A uniform replay buffer (time-limit form with ``bootstrap_timelimit``) of
        ``replay_size`` transitions over ``batch_spec.B`` environments, seeded from torch's
        generator (a seeded run replays the same batches)."""
        default = TlUniformReplayBuffer if self.bootstrap_timelimit else UniformReplayBuffer
        ReplayCls = self.ReplayBufferCls or default
        self.replay_buffer = ReplayCls(
            example=numpify_buffer(self.examples_to_buffer(examples)),
            size=self.replay_size,
            B=batch_spec.B,
            discount=self.discount,
            n_step_return=self.n_step_return,
            seed=int(torch.randint(2**62, ())),
        )

    def optim_initialize(self, rank: int = 0) -> None:
        """Build the optimizers; load ``initial_optim_state_dict`` when given."""
        self.rank = rank
        self._make_optimizers()
        if self.initial_optim_state_dict is not None:
            self.load_optim_state_dict(self.initial_optim_state_dict)

    def _make_optimizers(self) -> None:
        raise NotImplementedError

    def _optimizers(self) -> dict[str, torch.optim.Optimizer]:
        """The optimizers by their name in ``optim_state_dict``."""
        raise NotImplementedError

    def _make_optimizer(self, params: list[torch.nn.Parameter], lr: float, what: str) -> Any:
        if not params:
            raise ValueError(f"the agent's {what} is empty: there is nothing to optimize")
        return self.OptimCls(params, lr=lr, **self.optim_kwargs)

    # ------------------------------------------------------------------ training

    def optimize_agent(self, itr: int, samples: Any = None, sampler_itr: int | None = None) -> Any:
        """Store ``samples`` (when given), then, from ``min_itr_learn`` on, take
        ``updates_per_optimize`` updates on replayed batches. Returns the OptInfo of lists,
        empty before learning starts. ``sampler_itr`` replaces ``itr`` (async use)."""
        itr = itr if sampler_itr is None else sampler_itr
        buffer = self._replay_buffer
        if samples is not None:
            buffer.append_samples(self.samples_to_buffer(samples))
        opt_info = self.OptInfoCls(*([] for _ in self.OptInfoCls._fields))
        if itr < self.min_itr_learn:
            return opt_info
        for _ in range(self.updates_per_optimize):
            batch = buffer_to(torchify_buffer(buffer.sample_batch(self.batch_size)), self._device)
            self.update_counter += 1
            self._update(batch, opt_info)
            if self.update_counter % self.target_update_interval == 0:
                self._agent.update_target(self.target_update_tau)
        return opt_info

    def _update(self, samples: Any, opt_info: Any) -> None:
        """One update on a replayed batch, recorded in ``opt_info``."""
        raise NotImplementedError

    def _step(self, optimizer: torch.optim.Optimizer, loss: torch.Tensor, params: Any) -> float:
        """Backpropagate ``loss``, clip the gradient norm of ``params`` (the optimizer's),
        take the optimizer's step; returns the norm before clipping."""
        optimizer.zero_grad()
        loss.backward()
        return float(clip_and_step(optimizer, params, self.clip_grad_norm))

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

    def save_replay(self, path: str | os.PathLike[str]) -> None:
        """Write the replay buffer's whole state to ``path`` (.npz, written atomically)."""
        self._replay_buffer.save(path)

    def load_replay(self, path: str | os.PathLike[str]) -> None:
        """Restore the replay buffer saved by :meth:`save_replay` (same settings)."""
        self._replay_buffer.load(path)

    # ------------------------------------------------------------------ guards

    def _require(self, value: Any) -> Any:
        if value is None:
            raise RuntimeError(f"{type(self).__name__}.initialize(agent, ...) must be called first")
        return value

    @property
    def _agent(self) -> Any:
        return self._require(self.agent)

    @property
    def _device(self) -> torch.device:
        return self._agent.device

    @property
    def _replay_buffer(self) -> Any:
        return self._require(self.replay_buffer)


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
        _check_positive("q_target_clip", q_target_clip)
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
        opt_info.qLoss.append(q_loss.item())
        opt_info.qGradNorm.append(self._step(self.q_optimizer, q_loss, self._q_params))
        opt_info.q.append(q.mean().item())
        if self.update_counter % self.policy_update_interval == 0:
            mu_loss = self.mu_loss(samples)
            opt_info.muLoss.append(mu_loss.item())
            opt_info.muGradNorm.append(self._step(self.mu_optimizer, mu_loss, self._mu_params))

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
        loss = torch.stack([_masked_mean(0.5 * (y - q) ** 2, valid) for q in qs]).sum()
        return loss, qs[0].detach()

    def mu_loss(self, samples: Any) -> torch.Tensor:
        """``-mean(Q(s, mu(s)))``: the policy climbs the critic (held fixed)."""
        with frozen(self._q_params):
            return -self._agent.q_at_mu(*samples.agent_inputs).mean()
