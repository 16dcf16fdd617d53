"""PPO's minibatches: the batch laid out for them (single steps, whole environments'
sequences, or padded trajectories) and each epoch's random split of it."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import torch

from rl_arrays import buffer_func, buffer_method

from ._trajectories import trajectory_layout

__all__ = ["Minibatches", "check_minibatch_count", "pad_trajectories"]


def check_minibatch_count(minibatches: int, T: int, B: int, recurrent: bool) -> None:
    """Refuse more minibatches than a ``[T, B]`` batch has rows: ``B`` sequences for a
    recurrent agent, ``T * B`` steps otherwise."""
    n = B if recurrent else T * B
    if minibatches > n:
        what = f"B={B} sequences (recurrent agent)" if recurrent else f"T*B={T * B} steps"
        raise ValueError(f"minibatches={minibatches} is more than the batch's {what}")


class Minibatches:
    """A ``[T, B]`` batch of loss inputs (with the values recorded at sampling, for value
    clipping, and the initial rnn states ``[B, N, H]`` of a recurrent agent), laid out for
    minibatches: single steps, one flat batch of ``T * B``, for a feed-forward agent; whole
    environments' ``[T, B]`` sequences for a recurrent one; with ``padded``, its ``[T, N]``
    trajectories (see :func:`pad_trajectories`), a minibatch taking those of its
    environments."""

    def __init__(
        self,
        loss_inputs: Any,
        old_value: torch.Tensor | None,
        init_rnn_state: Any,
        done: torch.Tensor,
        recurrent: bool,
        padded: bool,
    ):
        T, B = int(done.shape[0]), int(done.shape[1])
        self.counts: torch.Tensor | None = None  # (padded: trajectories per environment)
        if padded:
            loss_inputs, old_value, init_rnn_state, self.counts = pad_trajectories(
                done, loss_inputs, old_value, init_rnn_state
            )
        elif not recurrent:
            loss_inputs = buffer_method(loss_inputs, "flatten", 0, 1)
            old_value = None if old_value is None else old_value.flatten(0, 1)
        self.loss_inputs, self.old_value, self.init_rnn_state = (
            loss_inputs,
            old_value,
            init_rnn_state,
        )
        self.recurrent = recurrent
        self.n = B if recurrent else T * B  # what minibatches split: environments or steps
        self.device = done.device

    def epoch(
        self, minibatches: int, generator: torch.Generator
    ) -> Iterator[tuple[Any, Any, torch.Tensor | None]]:
        """One pass over the batch in ``minibatches`` minibatches in an order drawn from
        ``generator`` (on the batch's device; none drawn for one minibatch, whose loss does
        not depend on the order): ``(loss inputs, initial rnn state, old values)`` of each."""
        recurrent, loss_inputs, old_value = self.recurrent, self.loss_inputs, self.old_value
        batch, batch_old_value = loss_inputs, old_value
        splits: list[slice] | tuple[torch.Tensor, ...] = [slice(None)]
        if minibatches > 1:
            order = torch.randperm(self.n, generator=generator, device=self.device)
            if recurrent:
                splits = order.tensor_split(minibatches)
            else:  # one gather of the epoch's order, then contiguous minibatches of it
                batch = loss_inputs[order]
                batch_old_value = None if old_value is None else old_value[order]
                splits = _split_slices(self.n, minibatches)
        for idxs in splits:
            if self.counts is not None and isinstance(idxs, torch.Tensor):  # environments
                idxs = _trajectories_of(idxs, self.counts)
            where = (slice(None), idxs) if recurrent else idxs
            minibatch = batch[where]
            mb_old_value = None if batch_old_value is None else batch_old_value[where]
            rnn_state = None if self.init_rnn_state is None else self.init_rnn_state[idxs]
            yield minibatch, rnn_state, mb_old_value


def pad_trajectories(
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
