"""The policy-gradient base: optimizer set-up, returns and advantages from a [T, B] batch."""

from __future__ import annotations

import copy
import math
from collections import namedtuple
from collections.abc import Callable, Iterable
from numbers import Real
from typing import Any

import torch

from rl_arrays import BatchSpec, as_count, buffer_method, buffer_to, torchify_buffer

from ._compile import UpdateSteps, check_compile, check_single_process, make_capturable
from ._protocols import PgAgentLike, PgDistributionLike
from ._returns import (
    discount_return,
    discount_return_tl,
    generalized_advantage_estimation,
    generalized_advantage_estimation_tl,
    valid_from_done,
)
from ._reward_scale import ReturnScaler

__all__ = ["OptInfo", "PolicyGradientAlgo"]

# Diagnostics of one optimize_agent call: each field a list with one float per gradient step.
OptInfo = namedtuple("OptInfo", ["loss", "gradNorm", "entropy", "perplexity"])

_AGENT_MEMBERS = ("parameters", "distribution", "recurrent", "device")


def check_number(
    name: str, value: Any, low: float | None = None, high: float | None = None
) -> None:
    """Raise a ValueError naming ``name`` unless ``value`` is a finite real in [low, high]."""
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    number = float(value)
    if (low is not None and number < low) or (high is not None and number > high):
        bounds = f"[{'-inf' if low is None else low}, {'inf' if high is None else high}]"
        raise ValueError(f"{name} must lie in {bounds}, got {value!r}")


def check_count(name: str, value: Any, low: int = 1) -> int:
    """``value`` as an int, from an int or an integral float such as 1e3 (rlpyt's way of
    writing counts); a ValueError naming ``name`` unless it is an integer >= ``low``."""
    return as_count(name, value, low)


def require_keys(state_dict: dict[str, Any], keys: tuple[str, ...]) -> None:
    """Refuse a state dict that lacks any of ``keys`` (not what ``optim_state_dict`` made)."""
    missing = [key for key in keys if key not in state_dict]
    if missing:
        raise ValueError(
            f"state_dict is missing {', '.join(map(repr, missing))}; expected what "
            "optim_state_dict() returns"
        )


def clip_grad_norm(params: Iterable[torch.Tensor], max_norm: float | None) -> torch.Tensor:
    """The 2-norm of all the gradients of ``params``, which are scaled down to ``max_norm``
    where it is larger (None: not clipped), as ``torch.nn.utils.clip_grad_norm_`` computes
    it, in about a third of its time: without its grouping of the tensors by device and
    dtype on every call (a model's gradients sit on one device, in one dtype)."""
    return clip_grads([param.grad for param in params if param.grad is not None], max_norm)


def clip_grads(grads: list[torch.Tensor], max_norm: float | None) -> torch.Tensor:
    """``clip_grad_norm`` on the gradient tensors themselves (or views of them)."""
    if not grads:
        return torch.zeros(())
    norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
    if max_norm is not None:
        torch._foreach_mul_(grads, (max_norm / (norm + 1e-6)).clamp_(max=1.0))
    return norm


def clip_and_step(
    optimizer: torch.optim.Optimizer,
    params: Iterable[torch.Tensor],
    clip_grad_norm_to: float | None,
) -> torch.Tensor:
    """Clip the gradients' norm to ``clip_grad_norm_to`` (None: no clipping), take an
    optimizer step; returns the norm before clipping (a tensor: reading it waits for the
    device)."""
    grad_norm = clip_grad_norm(params, clip_grad_norm_to)
    optimizer.step()
    return grad_norm


class PolicyGradientAlgo:
    """Base of the on-policy actor-critic algorithms (A2C, PPO).

    Holds the settings shared by both, builds the optimizer over ``agent.parameters()`` in
    :meth:`initialize`, and turns a batch of samples into returns, advantages and a valid mask
    (:meth:`process_returns`). Subclasses implement ``optimize_agent(itr, samples)``, whose
    gradient steps go through ``self._steps`` (``_update_step``: tensors in, tensors out,
    nothing read on the host, so that ``compile`` can replay it as a CUDA graph) and the
    loss functions ``_compile_losses`` sets.

    ``normalize_reward`` learns from rewards divided by the running standard deviation of
    the discounted return and clipped to ``[-reward_clip, reward_clip]`` (SB3's
    ``VecNormalize`` reward scaling, part of rl-baselines3-zoo's MuJoCo settings); its
    statistics are in :meth:`optim_state_dict`. The value function then predicts scaled
    returns.
    """

    bootstrap_value = True  # the sampler must record samples.agent.bootstrap_value
    opt_info_fields: tuple[str, ...] = OptInfo._fields
    # The values normalize_advantage may take (PPO adds "minibatch").
    normalize_advantage_modes: tuple[bool | str, ...] = (False, True)

    def __init__(
        self,
        discount: float,
        learning_rate: float,
        value_loss_coeff: float,
        entropy_loss_coeff: float,
        OptimCls: Callable[..., torch.optim.Optimizer],
        optim_kwargs: dict[str, Any] | None,
        clip_grad_norm: float | None,
        initial_optim_state_dict: dict[str, Any] | None,
        gae_lambda: float,
        normalize_advantage: bool | str,
        clip_grad_separately: bool = False,
        compile: bool | dict[str, Any] = False,
        normalize_reward: bool = False,
        reward_clip: float = 10.0,
    ):
        check_number("discount", discount, 0, 1)
        check_number("reward_clip", reward_clip, 0)
        check_number("learning_rate", learning_rate, 0)
        check_number("value_loss_coeff", value_loss_coeff, 0)
        check_number("entropy_loss_coeff", entropy_loss_coeff)
        check_number("gae_lambda", gae_lambda, 0, 1)
        if clip_grad_norm is not None:
            check_number("clip_grad_norm", clip_grad_norm, 0)
        if not callable(OptimCls):
            raise TypeError(f"OptimCls must be an optimizer class, got {OptimCls!r}")
        if optim_kwargs is not None and not isinstance(optim_kwargs, dict):
            raise TypeError(f"optim_kwargs must be a dict or None, got {optim_kwargs!r}")
        self.discount = discount
        self.learning_rate = learning_rate
        self.value_loss_coeff = value_loss_coeff
        self.entropy_loss_coeff = entropy_loss_coeff
        self.OptimCls = OptimCls
        if optim_kwargs is None and OptimCls in (torch.optim.Adam, torch.optim.AdamW):
            # The fused implementation: one kernel for every parameter, where the default
            # loops over them (a tenth to a fifth of a small network's update time).
            optim_kwargs = {"fused": True}
        self.optim_kwargs = dict(optim_kwargs or {})
        self.clip_grad_norm = clip_grad_norm
        self.clip_grad_separately = bool(clip_grad_separately)
        self.initial_optim_state_dict = initial_optim_state_dict
        self.gae_lambda = gae_lambda
        self.normalize_advantage = self._check_normalize_advantage(normalize_advantage)
        self.compile = compile
        self._compile_options = check_compile(compile)
        self.normalize_reward = bool(normalize_reward)
        self.reward_clip = reward_clip
        self.reward_scaler = ReturnScaler(discount, reward_clip) if normalize_reward else None
        self.agent: PgAgentLike | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.update_counter = 0

    def initialize(
        self,
        agent: PgAgentLike,
        n_itr: int,
        batch_spec: BatchSpec | None = None,
        mid_batch_reset: bool = False,
        examples: Any = None,
        world_size: int = 1,
        rank: int = 0,
    ) -> None:
        """Keep the agent and run settings, build the optimizer and load
        ``initial_optim_state_dict`` when given. ``examples`` is unused; ``batch_spec``
        (``.T``, ``.B``) lets subclasses check their settings against the batch."""
        missing = [name for name in _AGENT_MEMBERS if not hasattr(agent, name)]
        if missing or not callable(agent):
            raise TypeError(
                f"agent must be callable and have {', '.join(_AGENT_MEMBERS)} "
                f"(see rl_algos.PgAgentLike); missing: {', '.join(missing) or '__call__'}"
            )
        n_itr = check_count("n_itr", n_itr)
        world_size = check_count("world_size", world_size)
        check_single_process(self._compile_options, world_size)
        rank = check_count("rank", rank, 0)
        self.agent = agent
        self.n_itr = n_itr
        self.batch_spec = batch_spec
        self.mid_batch_reset = bool(mid_batch_reset)
        self.world_size, self.rank = world_size, rank
        if self.clip_grad_separately:
            gradient_groups = getattr(agent, "gradient_groups", None)
            if gradient_groups is None:
                raise TypeError(
                    "clip_grad_separately=True needs an agent with gradient_groups() (the "
                    f"gradients of its policy and value networks); {type(agent).__name__} has none"
                )
            gradient_groups()  # (an agent whose networks share parameters refuses here)
        self.optim_initialize(rank)
        if self.initial_optim_state_dict is not None:
            self.load_optim_state_dict(self.initial_optim_state_dict)

    def optim_initialize(self, rank: int = 0) -> None:
        """Build the optimizer over the agent's parameters."""
        self._params = list(self._agent.parameters())
        if not self._params:
            raise ValueError("agent.parameters() is empty: there is nothing to optimize")
        self.optimizer = self.OptimCls(self._params, lr=self.learning_rate, **self.optim_kwargs)
        graphs = self._compile_options is not None and self._agent.device.type == "cuda"
        if graphs:
            make_capturable([self.optimizer], type(self).__name__)
        self._compile_losses(self._compile_options)
        self._steps = UpdateSteps(self._update_step, type(self).__name__, graphs)

    def _compile_losses(self, options: dict[str, Any] | None) -> None:
        """Set the loss functions ``_update_step`` calls, compiled with ``options`` (None:
        as they are)."""
        raise NotImplementedError

    def _update_step(self, variant: Any, *inputs: Any) -> tuple[Any, ...]:
        """One gradient step; returns its diagnostics (tensors)."""
        raise NotImplementedError

    def optim_state_dict(self) -> dict[str, Any]:
        """A copy of everything needed to resume optimisation exactly: tensors, numbers, lists
        and dicts only, so it loads with ``torch.load(weights_only=True)``."""
        state = {
            "optimizer": copy.deepcopy(self._optimizer.state_dict()),
            "update_counter": self.update_counter,
        }
        if self.reward_scaler is not None:
            state["reward_scaler"] = self.reward_scaler.state_dict()
        return state

    def load_optim_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what :meth:`optim_state_dict` returned (a bare ``optimizer.state_dict()``
        is accepted too, as rlpyt saved, and then only the optimizer is restored)."""
        if not isinstance(state_dict, dict):
            raise TypeError(f"state_dict must be a dict, got {type(state_dict).__name__}")
        # Copies: the optimizer would otherwise update the caller's tensors in place.
        if "param_groups" in state_dict:
            self._optimizer.load_state_dict(copy.deepcopy(state_dict))
            self._restart_steps()
            return
        require_keys(state_dict, ("optimizer", "update_counter"))
        self._optimizer.load_state_dict(copy.deepcopy(state_dict["optimizer"]))
        self._restart_steps()
        self.update_counter = int(state_dict["update_counter"])
        if self.reward_scaler is not None and "reward_scaler" in state_dict:
            self.reward_scaler.load_state_dict(state_dict["reward_scaler"])

    def _restart_steps(self) -> None:
        """After the optimizer's state was replaced: captured steps would use the old one."""
        self._steps.restart([self._optimizer])

    def process_returns(self, samples: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Returns, advantages and a 0/1 float valid mask, each ``[T, B]``, for a batch.

        Discounted returns bootstrapped with ``samples.agent.bootstrap_value`` when
        ``gae_lambda == 1``, generalized advantage estimation otherwise; their time-limit forms
        when ``samples.env.env_info`` has a ``timeout`` field (a time-out step then gets
        return = its value and is masked out of ``valid``). Steps after a done are masked when
        the sampler does not reset mid-batch or the agent is recurrent (its training pass
        cannot reset its state mid-sequence; PPO's padded recurrent minibatches can).
        ``normalize_advantage=True`` standardises the advantages over the valid steps.
        """
        samples = torchify_buffer(samples)
        reward, done = samples.env.reward, samples.env.done
        value = samples.agent.agent_info.value
        bootstrap_value = getattr(samples.agent, "bootstrap_value", None)
        if bootstrap_value is None:
            raise ValueError(
                "samples.agent.bootstrap_value is missing: the sampler must be initialized with "
                "bootstrap_value=True (algo.bootstrap_value)"
            )
        timeout = getattr(samples.env.env_info, "timeout", None)
        if timeout is None and self.gae_lambda == 1:
            return_ = discount_return(reward, done, bootstrap_value, self.discount)
            advantage = return_ - value
        elif timeout is None:
            advantage, return_ = generalized_advantage_estimation(
                reward, value, done, bootstrap_value, self.discount, self.gae_lambda
            )
        elif self.gae_lambda == 1:
            return_ = discount_return_tl(
                reward, done, bootstrap_value, self.discount, timeout, value
            )
            advantage = return_ - value
        else:
            advantage, return_ = generalized_advantage_estimation_tl(
                reward, value, done, bootstrap_value, self.discount, self.gae_lambda, timeout
            )
        if self._blank_after_done():
            valid = valid_from_done(done).to(return_.dtype)
        else:
            valid = torch.ones_like(return_)
        if timeout is not None:
            valid = valid * ~timeout.bool()
        if self.normalize_advantage is True:
            advantage = self._normalize(advantage, valid)
        return return_, advantage, valid

    def _blank_after_done(self) -> bool:
        """Whether the steps after a done are left out of training: the sampler waited to
        reset, or a recurrent agent's training pass would run on through the reset."""
        return not self.mid_batch_reset or self._agent.recurrent

    def _check_normalize_advantage(self, value: Any) -> bool | str:
        if isinstance(value, str) and value in self.normalize_advantage_modes:
            return value
        if not isinstance(value, str) and value in (False, True):  # numpy bools and 0 / 1 too
            return bool(value)
        raise ValueError(
            f"normalize_advantage must be one of {self.normalize_advantage_modes}, got {value!r}"
        )

    @staticmethod
    def _normalize(advantage: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """Zero mean, unit standard deviation over the valid steps (std floored at 1e-6;
        unchanged when no step is valid), as masked sums: nothing is read on the host."""
        count = valid.sum()
        mean = (advantage * valid).sum() / count.clamp(min=1)
        variance = ((advantage - mean) ** 2 * valid).sum() / (count - 1).clamp(min=1)
        normalized = (advantage - mean) / variance.sqrt().clamp(min=1e-6)
        return torch.where(count > 0, normalized, advantage)

    def _prepare(self, samples: Any) -> Any:
        """The batch as tensors on the agent's device; the agent's observation statistics
        updated first, when it keeps any; with ``normalize_reward``, the rewards that the
        returns are computed from scaled (the agent's ``prev_reward`` input stays raw)."""
        samples = self._to_device(samples)
        update_obs_rms = getattr(self._agent, "update_obs_rms", None)
        if update_obs_rms is not None:
            update_obs_rms(samples.env.observation)
        if self.reward_scaler is not None:
            reward = self.reward_scaler(samples.env.reward, samples.env.done)
            samples = samples._replace(env=samples.env._replace(reward=reward))
        return samples

    def _to_device(self, samples: Any) -> Any:
        return buffer_to(torchify_buffer(samples), self._agent.device)

    def _forward(self, agent_inputs: Any, init_rnn_state: Any = None) -> tuple[Any, torch.Tensor]:
        """The agent's ``(dist_info, value)`` with grad; a recurrent agent starts from
        ``init_rnn_state``, given batch-first ``[B, N, H]`` as stored in samples."""
        if self._agent.recurrent:
            if init_rnn_state is None:
                raise ValueError("a recurrent agent needs samples.agent.agent_info.prev_rnn_state")
            state = buffer_method(buffer_method(init_rnn_state, "transpose", 0, 1), "contiguous")
            dist_info, value, _ = self._agent(*agent_inputs, state)
            return dist_info, value
        return self._agent(*agent_inputs)

    @staticmethod
    def _init_rnn_state(samples: Any, recurrent: bool) -> Any:
        """``prev_rnn_state`` at the first step, ``[B, N, H]``, for recurrent agents."""
        if not recurrent:
            return None
        prev_rnn_state = getattr(samples.agent.agent_info, "prev_rnn_state", None)
        return None if prev_rnn_state is None else prev_rnn_state[0]

    def _entropy_bonus(
        self, dist: PgDistributionLike, dist_info: Any, valid: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | float]:
        """``(mean entropy, -entropy_loss_coeff * mean entropy)``; with no bonus the entropy
        is a diagnostic only, computed outside the graph (a smaller backward pass)."""
        if self.entropy_loss_coeff == 0:
            with torch.no_grad():
                return dist.mean_entropy(dist_info, valid), 0.0
        entropy = dist.mean_entropy(dist_info, valid)
        return entropy, -self.entropy_loss_coeff * entropy

    def _clip_and_step(self) -> torch.Tensor:
        """Clip the gradient norm (each network's with ``clip_grad_separately``), take an
        optimizer step; returns the norm of all the gradients before clipping (a tensor:
        reading it as a number waits for the device). The caller counts the update (this
        runs inside a captured step, where Python does not run again)."""
        if self.clip_grad_separately:
            groups = self._agent.gradient_groups()  # type: ignore[attr-defined]  # optional member
            norms = torch.stack([clip_grads(grads, self.clip_grad_norm) for grads in groups])
            grad_norm = torch.linalg.vector_norm(norms)
            self._optimizer.step()
        else:
            grad_norm = clip_and_step(self._optimizer, self._params, self.clip_grad_norm)
        return grad_norm

    @property
    def _agent(self) -> PgAgentLike:
        if self.agent is None:
            raise RuntimeError(f"{type(self).__name__}.initialize(agent, ...) must be called first")
        return self.agent

    @property
    def _optimizer(self) -> torch.optim.Optimizer:
        if self.optimizer is None:
            raise RuntimeError(f"{type(self).__name__}.initialize(agent, ...) must be called first")
        return self.optimizer
