"""Proximal policy optimisation: epochs of minibatch steps on a clipped likelihood-ratio loss."""

from __future__ import annotations

import itertools
from collections import namedtuple
from collections.abc import Callable
from typing import Any

import torch

from rl_arrays import AgentInputs, BatchSpec, buffer_func, buffer_method, namedarraytuple

from ._compile import compiled
from ._pg import PolicyGradientAlgo, check_count, check_number
from ._protocols import PgAgentLike
from ._trajectories import trajectory_layout

__all__ = ["PPO", "LossInputs", "PpoOptInfo"]

# PPO's diagnostics: OptInfo's plus the mean KL(old || new), the fraction of valid steps
# whose likelihood ratio lay outside [1 - ratio_clip, 1 + ratio_clip], and the learning rate
# of the step, per minibatch.
PpoOptInfo = namedtuple(
    "PpoOptInfo",
    ["loss", "gradNorm", "entropy", "perplexity", "kl", "clipFraction", "learningRate"],
)

# rsl_rl's adaptive schedule: the factor and the bounds of the learning rate.
_LR_FACTOR, _MIN_LR, _MAX_LR = 1.5, 1e-5, 1e-2
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
            self._check_batch_size(int(batch_spec.T), int(batch_spec.B))

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
        """With ``desired_kl`` and an optimizer that takes a learning rate on the device
        (fused or capturable: fused Adam, the default): every group's rate one tensor
        there, which the adaptive rule sets in place, so that no minibatch waits for its
        KL to reach the host. Otherwise (``_lr`` None) the rate stays a float."""
        self._lr = None
        groups = self._optimizer.param_groups
        if self.desired_kl is None or not all(
            group.get("fused") or group.get("capturable") for group in groups
        ):
            return
        self._lr = torch.as_tensor(groups[0]["lr"], dtype=torch.float32).to(
            self._agent.device, copy=True
        )
        for group in groups:
            group["lr"] = self._lr

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
        self._check_batch_size(T, B)
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
        if padded:  # [T, N] trajectories; a minibatch takes those of its environments
            loss_inputs, old_value, init_rnn_state, counts = self._pad_trajectories(
                samples.env.done, loss_inputs, old_value, init_rnn_state
            )
        elif not recurrent:  # single steps: one flat batch of T * B
            loss_inputs = buffer_method(loss_inputs, "flatten", 0, 1)
            old_value = None if old_value is None else old_value.flatten(0, 1)
        n = B if recurrent else T * B
        losses, grad_norms, steps, learning_rates = [], [], [], []
        if isinstance(self._ratio_clip_arg, torch.Tensor):
            self._ratio_clip_arg.fill_(self.ratio_clip)
        else:
            self._ratio_clip_arg = self.ratio_clip
        # A float, or a tensor on the device (desired_kl; compiled on CUDA), which only
        # desired_kl changes between the steps.
        lr = self._optimizer.param_groups[0]["lr"]
        for _ in range(self.epochs):
            # The whole batch by default: its loss does not depend on the order.
            batch, batch_old_value = loss_inputs, old_value
            splits: list[slice] | tuple[torch.Tensor, ...] = [slice(None)]
            if self.minibatches > 1:
                order = torch.randperm(n, generator=self._generator, device=reward.device)
                if recurrent:
                    splits = order.tensor_split(self.minibatches)
                else:  # one gather of the epoch's order, then contiguous minibatches of it
                    batch = loss_inputs[order]
                    batch_old_value = None if old_value is None else old_value[order]
                    splits = _split_slices(n, self.minibatches)
            for idxs in splits:
                if padded and isinstance(idxs, torch.Tensor):  # (minibatches > 1: environments)
                    idxs = _trajectories_of(idxs, counts)
                where = (slice(None), idxs) if recurrent else idxs
                minibatch = batch[where]
                mb_old_value = None if batch_old_value is None else batch_old_value[where]
                rnn_state = None if init_rnn_state is None else init_rnn_state[idxs]
                loss, grad_norm, dist_info, ratio = self._steps(
                    None, minibatch, rnn_state, mb_old_value
                )
                self.update_counter += 1
                if self.desired_kl is not None:  # (a tensor changed in place, or a new float)
                    lr = self._optimizer.param_groups[0]["lr"]
                learning_rates.append(lr.clone() if isinstance(lr, torch.Tensor) else lr)
                grad_norms.append(grad_norm)
                losses.append(loss)
                steps.append((dist_info, ratio, minibatch.old_dist_info, minibatch.valid))
        # Every per-step diagnostic in one read from the device (the learning rates too
        # when they live there).
        on_device_lr = isinstance(lr, torch.Tensor)
        rows = [torch.stack(losses)[None], torch.stack(grad_norms)[None], self._diagnostics(steps)]
        if on_device_lr:
            rows.append(torch.stack(learning_rates).to(rows[0].dtype)[None])
        diagnostics = torch.cat(rows)
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
            learningRate=lrs[0] if on_device_lr else learning_rates,
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
        clipped_ratio = torch.clamp(ratio, 1.0 - eps, 1.0 + eps)  # type: ignore[arg-type]  # a float or a tensor
        surrogate = torch.min(ratio * advantage, clipped_ratio * advantage)
        # The policy and value losses as one weighted sum over the valid steps: a small
        # network's step costs about as much per operation as per flop.
        squared_error = (value - return_) ** 2
        if self.value_clip is not None and old_value is not None:  # (both or neither)
            clipped = old_value + (value - old_value).clamp(-self.value_clip, self.value_clip)
            squared_error = torch.max(squared_error, (clipped - return_) ** 2)
        value_error = (0.5 * self.value_loss_coeff) * squared_error
        loss = ((value_error - surrogate) * (valid / valid.sum())).sum()
        if self.entropy_loss_coeff != 0:
            loss = loss - self.entropy_loss_coeff * dist.mean_entropy(dist_info, valid)
        return loss, buffer_method(dist_info, "detach"), ratio.detach()

    @staticmethod
    def _pad_trajectories(
        done: torch.Tensor,
        loss_inputs: Any,
        old_value: torch.Tensor | None,
        init_rnn_state: Any,
    ) -> tuple[Any, torch.Tensor | None, Any, torch.Tensor]:
        """The batch as ``[T, N]`` trajectories (see ``split_and_pad_trajectories``), each
        trajectory's initial rnn state, and the number of trajectories of each environment.

        The padding repeats each trajectory's last step, marked not valid, rather than zeros
        that no loss term should see (a zero probability would make a NaN ratio).
        """
        time, env, masks = trajectory_layout(done)
        valid = loss_inputs.valid[time, env] * masks
        loss_inputs = loss_inputs[time, env]._replace(valid=valid)
        old_value = None if old_value is None else old_value[time, env]
        if init_rnn_state is not None:
            init_rnn_state = buffer_func(init_rnn_state, _start_states, env[0], time[0] == 0)
        counts = torch.bincount(env[0], minlength=done.shape[1])
        return loss_inputs, old_value, init_rnn_state, counts

    @torch.no_grad()
    def _adapt_learning_rate(
        self, old_dist_info: Any, dist_info: Any, weights: torch.Tensor | None
    ) -> None:
        """rsl_rl's adaptive schedule on the minibatch's mean KL(old || new) (over the
        steps where ``weights`` is 1; None: every step, as rsl_rl averages): slow down when
        the policy moved too far from the sampling one, speed up when it barely moved (not
        at exactly 0: it has not moved yet); every process decides on the same KL. On the
        device when the rate lives there (``_lr``); else the KL is read on the host."""
        desired_kl = self.desired_kl
        assert desired_kl is not None  # (optimize_agent calls this only with desired_kl)
        kl = self._agent.distribution.mean_kl(old_dist_info, dist_info, weights)
        distributed = torch.distributed
        if distributed.is_available() and distributed.is_initialized():
            world_size = distributed.get_world_size()
            if world_size > 1:
                kl = kl.clone()
                distributed.all_reduce(kl)
                kl = kl / world_size
        lr = self._lr
        if lr is None:  # (an optimizer that takes only a float: decided on the host)
            kl_value, rate = float(kl), float(self._optimizer.param_groups[0]["lr"])
            if kl_value > 2.0 * desired_kl:
                rate = max(_MIN_LR, rate / _LR_FACTOR)
            elif 0.0 < kl_value < desired_kl / 2.0:
                rate = min(_MAX_LR, rate * _LR_FACTOR)
            for group in self._optimizer.param_groups:
                group["lr"] = rate
            return
        slower = (lr / _LR_FACTOR).clamp(min=_MIN_LR)
        faster = (lr * _LR_FACTOR).clamp(max=_MAX_LR)
        barely_moved = (kl > 0) & (kl < desired_kl / 2.0)
        lr.copy_(torch.where(kl > 2.0 * desired_kl, slower, torch.where(barely_moved, faster, lr)))
        for group in self._optimizer.param_groups:  # (groups added since: the same rate)
            group["lr"] = lr

    def _blank_after_done(self) -> bool:
        """Padded recurrent minibatches restart the state at every episode: nothing after a
        done needs leaving out unless the sampler waited to reset."""
        if self._agent.recurrent and self.recurrent_minibatch == "padded":
            return not self.mid_batch_reset
        return super()._blank_after_done()

    @torch.no_grad()
    def _diagnostics(
        self, steps: list[tuple[Any, torch.Tensor, Any, torch.Tensor]]
    ) -> torch.Tensor:
        """Mean entropy, perplexity, KL(old || new) and clip fraction ``[4, steps]`` over the
        valid data of each gradient step (``steps``: its ``(dist_info, ratio, old_dist_info,
        valid)``), all computed at once after the steps rather than in a few dozen small
        operations each."""
        dist = self._agent.distribution

        # valid has the minibatch's leading dims: [n] single steps, or [T, B_mb] sequences
        dist_info, ratio, old_dist_info, valid = (
            _cat([buffer_func(step[i], _flatten_lead, step[3].dim()) for step in steps])
            for i in range(4)
        )
        outside = ((ratio - 1.0).abs() > self.ratio_clip).to(ratio.dtype)
        values = torch.stack(
            [
                dist.entropy(dist_info),
                dist.perplexity(dist_info),
                dist.kl(old_dist_info, dist_info),
                outside,
            ]
        )
        # Built on the data's device: a copy from the host would wait for the device.
        step_of = torch.cat(
            [torch.full((step[3].numel(),), i, device=valid.device) for i, step in enumerate(steps)]
        )
        sums = values.new_zeros(4, len(steps)).index_add_(1, step_of, values * valid)
        counts = valid.new_zeros(len(steps)).index_add_(0, step_of, valid)
        return sums / counts

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
        self._require_keys(state_dict, ("ratio_clip", "generator"))
        if (self.lr_scheduler is None) != ("lr_scheduler" not in state_dict):
            raise ValueError(
                "state_dict and this PPO disagree on linear_lr_schedule "
                f"(this one has linear_lr_schedule={self.linear_lr_schedule})"
            )
        if self.lr_scheduler is not None:
            self.lr_scheduler.load_state_dict(state_dict["lr_scheduler"])
        self.ratio_clip = float(state_dict["ratio_clip"])
        self._generator.set_state(state_dict["generator"])

    def _check_batch_size(self, T: int, B: int) -> None:
        recurrent = self._agent.recurrent
        n = B if recurrent else T * B
        if self.minibatches > n:
            what = f"B={B} sequences (recurrent agent)" if recurrent else f"T*B={T * B} steps"
            raise ValueError(f"minibatches={self.minibatches} is more than the batch's {what}")


def _start_states(state: torch.Tensor, env: torch.Tensor, at_first: torch.Tensor) -> torch.Tensor:
    """Each trajectory's initial rnn state, batch-first: its environment's stored state when
    it began at the batch's first step, zeros when it began after a done (the sampler's
    agent reset its state there)."""
    at_first = at_first.view(-1, *[1] * (state.dim() - 1))
    return torch.where(
        at_first, state[env], torch.zeros((), dtype=state.dtype, device=state.device)
    )


def _trajectories_of(envs: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """The indices of the trajectories of ``envs``, in their order (``counts``: trajectories
    per environment, numbered environment by environment)."""
    first = counts.cumsum(0) - counts
    n = counts[envs]
    offset = torch.arange(int(n.sum()), device=envs.device) - torch.repeat_interleave(
        n.cumsum(0) - n, n
    )
    return torch.repeat_interleave(first[envs], n) + offset


def _split_slices(n: int, parts: int) -> list[slice]:
    """``range(n)`` in ``parts`` contiguous slices, sized as ``tensor_split`` sizes them (the
    first ``n % parts`` one longer), so an epoch's minibatches are those of its order."""
    size, longer = divmod(n, parts)
    starts = [i * size + min(i, longer) for i in range(parts + 1)]
    return [slice(start, end) for start, end in itertools.pairwise(starts)]


def _flatten_lead(x: torch.Tensor, lead: int) -> torch.Tensor:
    return x.reshape(-1, *x.shape[lead:])


def _cat(parts: list[Any]) -> Any:
    """Concatenate same-structured buffers (tensors or namedarraytuples of them) on dim 0."""
    first = parts[0]
    if first is None:
        return None
    if hasattr(first, "_make"):  # a namedarraytuple
        return first._make(_cat(list(leaves)) for leaves in zip(*parts, strict=True))
    return torch.cat(parts)
