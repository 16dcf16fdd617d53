"""Proximal policy optimisation: epochs of minibatch steps on a clipped likelihood-ratio loss."""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable
from typing import Any

import torch

from rl_arrays import AgentInputs, BatchSpec, buffer_method, namedarraytuple

from ._adaptive_lr import adapt_learning_rate, process_mean, shared_learning_rate
from ._compile import compiled
from ._pg import PolicyGradientAlgo, check_count, check_number, require_keys
from ._ppo_diagnostics import StepRecords
from ._ppo_loss import clipped_loss
from ._ppo_minibatches import Minibatches, check_minibatch_count
from ._protocols import PgAgentLike

__all__ = ["PPO", "LossInputs", "PpoOptInfo"]

# PPO's diagnostics: OptInfo's plus the mean KL(old || new), the fraction of valid steps
# whose likelihood ratio lay outside [1 - ratio_clip, 1 + ratio_clip], and the learning rate
# of the step, per minibatch.
PpoOptInfo = namedtuple(
    "PpoOptInfo",
    ["loss", "gradNorm", "entropy", "perplexity", "kl", "clipFraction", "learningRate"],
)

_RECURRENT_MINIBATCHES = ("sequence", "padded")

LossInputs = namedarraytuple(
    "LossInputs", ["agent_inputs", "action", "return_", "advantage", "valid", "old_dist_info"]
)
LossInputs.__doc__ = "Everything PPO's loss reads, sliced together into minibatches."


class PPO(PolicyGradientAlgo):
    """Proximal Policy Optimization (clipped surrogate objective).

    Each ``optimize_agent`` makes ``epochs`` passes over the batch in ``minibatches`` random
    minibatches (single steps for feed-forward agents, whole environments for recurrent ones).
    ``linear_lr_schedule`` anneals the learning rate and ``ratio_clip`` linearly to 0 over
    ``n_itr`` calls. Options from rsl_rl, all off by default: ``desired_kl`` (adaptive
    learning rate; excludes ``linear_lr_schedule``), ``value_clip``,
    ``normalize_advantage="minibatch"``, ``clip_grad_separately`` (the policy's and the
    value function's gradient norms clipped each on its own) and
    ``recurrent_minibatch="padded"``. What each does: the package README, "PPO in detail".
    """

    opt_info_fields: tuple[str, ...] = PpoOptInfo._fields
    normalize_advantage_modes: tuple[bool | str, ...] = (False, True, "minibatch")

    def __init__(
        self,
        discount: float = 0.99,
        learning_rate: float = 0.001,
        value_loss_coeff: float = 1.0,
        entropy_loss_coeff: float = 0.01,
        OptimCls: Callable[..., torch.optim.Optimizer] = torch.optim.Adam,
        optim_kwargs: dict[str, Any] | None = None,
        clip_grad_norm: float | None = 1.0,
        initial_optim_state_dict: dict[str, Any] | None = None,
        gae_lambda: float = 1,
        minibatches: int = 4,
        epochs: int = 4,
        ratio_clip: float = 0.1,
        linear_lr_schedule: bool = True,
        normalize_advantage: bool | str = False,
        desired_kl: float | None = None,
        value_clip: float | None = None,
        recurrent_minibatch: str = "sequence",
        clip_grad_separately: bool = False,
        compile: bool | dict[str, Any] = False,
        normalize_reward: bool = False,
        reward_clip: float = 10.0,
    ):
        super().__init__(
            discount=discount,
            learning_rate=learning_rate,
            value_loss_coeff=value_loss_coeff,
            entropy_loss_coeff=entropy_loss_coeff,
            OptimCls=OptimCls,
            optim_kwargs=optim_kwargs,
            clip_grad_norm=clip_grad_norm,
            initial_optim_state_dict=initial_optim_state_dict,
            gae_lambda=gae_lambda,
            normalize_advantage=normalize_advantage,
            clip_grad_separately=clip_grad_separately,
            compile=compile,
            normalize_reward=normalize_reward,
            reward_clip=reward_clip,
        )
        minibatches = check_count("minibatches", minibatches)
        epochs = check_count("epochs", epochs)
        check_number("ratio_clip", ratio_clip, 0)
        if desired_kl is not None:
            check_number("desired_kl", desired_kl, 0)
            if desired_kl == 0:
                raise ValueError("desired_kl must be positive (or None), got 0")
            if linear_lr_schedule:
                raise ValueError(
                    "desired_kl and linear_lr_schedule=True both set the learning rate: "
                    "pass linear_lr_schedule=False with desired_kl"
                )
        if value_clip is not None:
            check_number("value_clip", value_clip, 0)
        if recurrent_minibatch not in _RECURRENT_MINIBATCHES:
            raise ValueError(
                f"recurrent_minibatch must be one of {_RECURRENT_MINIBATCHES}, "
                f"got {recurrent_minibatch!r}"
            )
        self.minibatches = minibatches
        self.epochs = epochs
        self.ratio_clip = ratio_clip  # the current value; annealed with the learning rate
        self._base_ratio_clip = ratio_clip
        self.linear_lr_schedule = bool(linear_lr_schedule)
        self.desired_kl = desired_kl
        self.value_clip = value_clip
        self.recurrent_minibatch = recurrent_minibatch
        self.lr_scheduler: torch.optim.lr_scheduler.LambdaLR | None = None
        self._lr: torch.Tensor | None = None  # desired_kl's rate on the device, if any

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
        """As the base, and checks that ``batch_spec`` (when given) has room for
        ``minibatches``: ``B`` sequences for a recurrent agent, ``T * B`` steps otherwise."""
        super().initialize(agent, n_itr, batch_spec, mid_batch_reset, examples, world_size, rank)
        if (
            self._compile_options is not None
            and agent.recurrent
            and self.recurrent_minibatch == "padded"
        ):
            raise ValueError(
                'compile=True cannot take recurrent_minibatch="padded": its minibatches change '
                "shape with the episodes, and a captured update step has fixed shapes"
            )
        if batch_spec is not None:
            T, B = int(batch_spec.T), int(batch_spec.B)
            check_minibatch_count(self.minibatches, T, B, self._agent.recurrent)

    def optim_initialize(self, rank: int = 0) -> None:
        """Build the optimizer, the linear learning-rate schedule (when enabled) and the
        random generator that draws minibatches (seeded from torch's global generator)."""
        super().optim_initialize(rank)
        n_itr = self.n_itr

        def lr_factor(itr: int) -> float:
            return max(0.0, (n_itr - itr) / n_itr)

        self._lr_factor = lr_factor
        if self.linear_lr_schedule:
            self.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(self._optimizer, lr_factor)
        # On the agent's device: the minibatch order is drawn where the batch lives (a CPU
        # permutation of a GPU batch would cross to the device every epoch).
        self._generator = torch.Generator(self._agent.device)
        self._generator.manual_seed(int(torch.randint(2**62, ())))
        self.ratio_clip = self._base_ratio_clip
        self._share_learning_rate()

    def _restart_steps(self) -> None:
        self._share_learning_rate()  # (a loaded optimizer state brings its own rates)
        super()._restart_steps()

    def _share_learning_rate(self) -> None:
        """With ``desired_kl``, the learning rate on the device where the optimizer takes it
        there (see ``shared_learning_rate``); else (``_lr`` None) a float."""
        self._lr = None
        if self.desired_kl is not None:
            self._lr = shared_learning_rate(self._optimizer, self._agent.device)

    def _compile_losses(self, options: dict[str, Any] | None) -> None:
        self._loss_fn = compiled(self.loss, options, self._agent.recurrent)
        # Compiled, the ratio clip is a tensor that the schedule changes in place: a float
        # would be read once, when the code is compiled or captured.
        device = self._agent.device
        self._ratio_clip_arg: float | torch.Tensor = (
            self.ratio_clip if options is None else torch.tensor(self.ratio_clip, device=device)
        )

    def _update_step(self, variant: Any, *inputs: Any) -> tuple[Any, ...]:
        """One gradient step on a minibatch: ``(loss, grad norm, dist_info, ratio)``."""
        minibatch, rnn_state, old_value = inputs
        if self.normalize_advantage == "minibatch":
            advantage = self._normalize(minibatch.advantage, minibatch.valid)
            minibatch = minibatch._replace(advantage=advantage)
        self._optimizer.zero_grad()
        loss, dist_info, ratio = self._loss_fn(
            minibatch.agent_inputs,
            minibatch.action,
            minibatch.return_,
            minibatch.advantage,
            minibatch.valid,
            minibatch.old_dist_info,
            rnn_state,
            old_value=old_value,
            ratio_clip=self._ratio_clip_arg,
        )
        if self.desired_kl is not None:  # (recurrent: the padding left out; never compiled)
            kl_weights = minibatch.valid if self._agent.recurrent else None
            self._adapt_learning_rate(minibatch.old_dist_info, dist_info, kl_weights)
        loss.backward()
        return loss.detach(), self._clip_and_step(), dist_info, ratio

    def optimize_agent(self, itr: int, samples: Any) -> PpoOptInfo:
        """``epochs`` passes of minibatch gradient steps on ``samples``; one PpoOptInfo entry
        per step. Then the learning rate and ratio clip move one step along their schedule."""
        samples = self._prepare(samples)
        agent = self._agent
        reward = samples.env.reward
        if reward.dim() != 2:
            raise ValueError(f"samples must have [T, B] leading dims, got reward {reward.shape}")
        T, B = int(reward.shape[0]), int(reward.shape[1])
        recurrent = agent.recurrent
        check_minibatch_count(self.minibatches, T, B, recurrent)
        return_, advantage, valid = self.process_returns(samples)
        loss_inputs = LossInputs(
            agent_inputs=AgentInputs(
                samples.env.observation, samples.agent.prev_action, samples.env.prev_reward
            ),
            action=samples.agent.action,
            return_=return_,
            advantage=advantage,
            valid=valid,
            old_dist_info=samples.agent.agent_info.dist_info,
        )
        old_value = samples.agent.agent_info.value if self.value_clip is not None else None
        init_rnn_state = self._init_rnn_state(samples, recurrent)  # [B, N, H]: sliced over B
        padded = recurrent and self.recurrent_minibatch == "padded"
        batches = Minibatches(
            loss_inputs, old_value, init_rnn_state, samples.env.done, recurrent, padded
        )
        records = StepRecords()
        if isinstance(self._ratio_clip_arg, torch.Tensor):
            self._ratio_clip_arg.fill_(self.ratio_clip)
        else:
            self._ratio_clip_arg = self.ratio_clip
        # A float, or a tensor on the device (desired_kl; compiled on CUDA), which only
        # desired_kl changes between the steps.
        lr = self._optimizer.param_groups[0]["lr"]
        for _ in range(self.epochs):
            for minibatch, rnn_state, mb_old_value in batches.epoch(
                self.minibatches, self._generator
            ):
                loss, grad_norm, dist_info, ratio = self._steps(
                    None, minibatch, rnn_state, mb_old_value
                )
                self.update_counter += 1
                if self.desired_kl is not None:  # (a tensor changed in place, or a new float)
                    lr = self._optimizer.param_groups[0]["lr"]
                records.add(loss, grad_norm, lr, dist_info, ratio, minibatch)
        # Every per-step diagnostic in one read from the device (the learning rates too
        # when they live there).
        on_device_lr = isinstance(lr, torch.Tensor)
        diagnostics = records.table(self._agent.distribution, self.ratio_clip, on_device_lr)
        # (compiled: left on the device, for the runner to read once per log row)
        compiled = self._compile_options is not None
        loss, grad_norm, entropy, perplexity, kl, clip_fraction, *lrs = (
            diagnostics if compiled else diagnostics.tolist()
        )
        opt_info = PpoOptInfo(
            loss=loss,
            gradNorm=grad_norm,
            entropy=entropy,
            perplexity=perplexity,
            kl=kl,
            clipFraction=clip_fraction,
            learningRate=lrs[0] if on_device_lr else records.learning_rates,
        )
        if self.lr_scheduler is not None:
            self.lr_scheduler.step()
            self.ratio_clip = self._base_ratio_clip * self._lr_factor(self.lr_scheduler.last_epoch)
        return opt_info

    def loss(
        self,
        agent_inputs: Any,
        action: torch.Tensor,
        return_: torch.Tensor,
        advantage: torch.Tensor,
        valid: torch.Tensor,
        old_dist_info: Any,
        init_rnn_state: Any = None,
        old_value: torch.Tensor | None = None,
        ratio_clip: float | torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, Any, torch.Tensor]:
        """``(loss, dist_info, ratio)`` for one minibatch: the loss with grad, and the new
        distribution parameters and likelihood ratios, detached, for the diagnostics.

        Policy loss ``-mean(min(ratio * adv, clip(ratio, 1 - eps, 1 + eps) * adv))``, value loss
        ``value_loss_coeff * mean(0.5 * (value - return)^2)``, entropy bonus
        ``-entropy_loss_coeff * mean(entropy)``; means over the valid steps. ``init_rnn_state``
        (recurrent agents) is batch-first ``[B, N, H]``, as stored in samples. With
        ``value_clip``, ``(value - return)^2`` becomes ``max((value - return)^2, (old_value +
        clip(value - old_value, -value_clip, value_clip) - return)^2)``, ``old_value`` being
        the value recorded at sampling time. ``ratio_clip`` (None: the current one) may be a
        tensor.
        """
        if self.value_clip is not None and old_value is None:
            raise ValueError("value_clip needs old_value, the values recorded when sampling")
        agent = self._agent
        dist_info, value = self._forward(agent_inputs, init_rnn_state)
        dist = agent.distribution
        ratio = dist.likelihood_ratio(action, old_dist_info, dist_info)
        eps = self.ratio_clip if ratio_clip is None else ratio_clip
        loss = clipped_loss(
            ratio,
            advantage,
            value,
            return_,
            valid,
            eps,
            self.value_loss_coeff,
            old_value,
            self.value_clip,
        )
        if self.entropy_loss_coeff != 0:
            loss = loss - self.entropy_loss_coeff * dist.mean_entropy(dist_info, valid)
        return loss, buffer_method(dist_info, "detach"), ratio.detach()

    @torch.no_grad()
    def _adapt_learning_rate(
        self, old_dist_info: Any, dist_info: Any, weights: torch.Tensor | None
    ) -> None:
        """rsl_rl's adaptive schedule (``adapt_learning_rate``) on the minibatch's mean
        KL(old || new) over the steps where ``weights`` is 1 (None: every step, as rsl_rl
        averages), the same in every process."""
        desired_kl = self.desired_kl
        assert desired_kl is not None  # (optimize_agent calls this only with desired_kl)
        kl = self._agent.distribution.mean_kl(old_dist_info, dist_info, weights)
        adapt_learning_rate(self._optimizer, process_mean(kl), desired_kl, self._lr)

    def _blank_after_done(self) -> bool:
        """Padded recurrent minibatches restart the state at every episode: nothing after a
        done needs leaving out unless the sampler waited to reset."""
        if self._agent.recurrent and self.recurrent_minibatch == "padded":
            return not self.mid_batch_reset
        return super()._blank_after_done()

    def optim_state_dict(self) -> dict[str, Any]:
        """The base's state plus the learning-rate schedule, the current ratio clip and the
        minibatch generator's state, so a resumed run draws the same minibatches. The current
        learning rate (adapted with ``desired_kl``) is in the optimizer's param groups."""
        state = super().optim_state_dict()
        state["ratio_clip"] = self.ratio_clip
        state["generator"] = self._generator.get_state()
        if self.lr_scheduler is not None:
            state["lr_scheduler"] = self.lr_scheduler.state_dict()
        return state

    def load_optim_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_optim_state_dict(state_dict)
        if "param_groups" in state_dict:  # a bare optimizer state: nothing more to restore
            return
        require_keys(state_dict, ("ratio_clip", "generator"))
        if (self.lr_scheduler is None) != ("lr_scheduler" not in state_dict):
            raise ValueError(
                "state_dict and this PPO disagree on linear_lr_schedule "
                f"(this one has linear_lr_schedule={self.linear_lr_schedule})"
            )
        if self.lr_scheduler is not None:
            self.lr_scheduler.load_state_dict(state_dict["lr_scheduler"])
        self.ratio_clip = float(state_dict["ratio_clip"])
        self._generator.set_state(state_dict["generator"])
