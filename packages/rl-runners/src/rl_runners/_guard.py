"""Stopping a run at the first non-finite number, without reading the device each iteration.

Each iteration ``observe`` notes, on the data's own device, whether the environments'
observations and rewards, the algorithm's losses and gradient norms, and the agent's
parameters are finite (a few tensor operations, no host read); ``check`` reads those notes
once (at each log interval, before any snapshot is written) and raises ``NonFiniteError``
naming the first iteration and quantity that went wrong.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import torch

from ._logger import logger

__all__ = ["FiniteGuard", "NonFiniteError"]

GROWTH_WARNING = 1e4  # a loss this many times its first value (or 1) gets one warning


class NonFiniteError(FloatingPointError):
    """A non-finite observation, reward, loss, gradient norm or parameter (named)."""


def _leaves(value: Any) -> Iterable[torch.Tensor]:
    """The floating-point tensors of a tensor or a (nested) namedarraytuple of them."""
    if isinstance(value, torch.Tensor):
        if value.is_floating_point():
            yield value
    elif isinstance(value, tuple):
        for item in value:
            yield from _leaves(item)


def _watched_fields(fields: Sequence[str]) -> list[str]:
    """The OptInfo fields that a diverging update makes non-finite first."""
    return [f for f in fields if "loss" in f.lower() or "gradnorm" in f.lower()]


class FiniteGuard:
    """See the module. ``env``: how errors name the environment (its id)."""

    def __init__(self, opt_info_fields: Sequence[str], env: str | None = None):
        self.env = env
        self.loss_fields = _watched_fields(opt_info_fields)
        self.names = ["observation", "reward", *self.loss_fields, "parameters"]
        self._first_bad: dict[torch.device, torch.Tensor] = {}  # per quantity: itr, or -1
        self._true: dict[torch.device, torch.Tensor] = {}
        self._loss_max: dict[torch.device, torch.Tensor] = {}  # per loss field, this interval
        self._host_bad: dict[str, int] = {}  # quantities given as Python numbers
        self._host_loss_max = [0.0] * len(self.loss_fields)
        self._first_loss: list[Any] = [None] * len(self.loss_fields)  # (a tensor until read)
        self._warned = False

    def observe(self, itr: int, samples: Any, opt_info: Any, parameters: Iterable[Any]) -> None:
        """Note which of this iteration's numbers are finite (no host read)."""
        flags: dict[torch.device, list[tuple[int, torch.Tensor]]] = {}
        env = getattr(samples, "env", samples)  # (rl_arrays' Samples, or the env's fields)
        for index, value in enumerate(
            (getattr(env, "observation", None), getattr(env, "reward", None))
        ):
            for leaf in _leaves(value):
                flags.setdefault(leaf.device, []).append((index, leaf.isfinite().all()))
        params = [p.detach() for p in parameters if p.is_floating_point()]
        for device in {p.device for p in params}:
            on_device = [p for p in params if p.device == device]
            norms = torch.stack(torch._foreach_norm(on_device))
            flags.setdefault(device, []).append((len(self.names) - 1, norms.isfinite().all()))
        for i, field in enumerate(self.loss_fields):
            self._observe_loss(itr, i, getattr(opt_info, field, []), flags)
        for device, noted in flags.items():
            self._note(itr, device, noted)

    def _observe_loss(self, itr: int, i: int, values: Any, flags: dict[torch.device, list]) -> None:
        if isinstance(values, torch.Tensor):
            if values.numel():
                if self._first_loss[i] is None:
                    self._first_loss[i] = values.detach().reshape(-1)[0].abs()
                flags.setdefault(values.device, []).append((2 + i, values.isfinite().all()))
                loss_max = self._loss_max.setdefault(
                    values.device,
                    torch.zeros(len(self.loss_fields), dtype=torch.float64, device=values.device),
                )
                loss_max[i] = torch.maximum(loss_max[i], values.detach().abs().max().double())
            return
        for value in values if isinstance(values, list | tuple) else [values]:
            value = float(value)
            if self._first_loss[i] is None:
                self._first_loss[i] = abs(value)
            if not math.isfinite(value):
                self._host_bad.setdefault(self.names[2 + i], itr)
            else:
                self._host_loss_max[i] = max(self._host_loss_max[i], abs(value))

    def _note(self, itr: int, device: torch.device, noted: list[tuple[int, torch.Tensor]]) -> None:
        first = self._first_bad.get(device)
        if first is None:
            first = self._first_bad[device] = torch.full(
                (len(self.names),), -1, dtype=torch.int64, device=device
            )
            self._true[device] = torch.ones((), dtype=torch.bool, device=device)
        finite = [self._true[device]] * len(self.names)
        for i, flag in noted:
            finite[i] = flag if finite[i] is self._true[device] else finite[i] & flag
        bad = ~torch.stack(finite)
        first.copy_(torch.where(bad & (first < 0), itr, first))

    def check(self) -> None:
        """Raise ``NonFiniteError`` for the first non-finite quantity seen; warn (once) of a
        loss grown by orders of magnitude since the first interval. Reads each device once."""
        first_bad = dict(self._host_bad)
        loss_max, n = list(self._host_loss_max), len(self.names)
        for device, first in self._first_bad.items():
            losses = self._loss_max.get(device)
            read = first.tolist() if losses is None else torch.cat([first, losses]).tolist()
            if losses is not None:
                loss_max = [max(a, b) for a, b in zip(loss_max, read[n:], strict=True)]
                losses.zero_()
            for name, itr in zip(self.names, read[:n], strict=True):
                if itr >= 0 and itr < first_bad.get(name, math.inf):
                    first_bad[name] = int(itr)
        self._host_loss_max = [0.0] * len(self.loss_fields)
        if first_bad:
            itr = min(first_bad.values())
            name = next(n for n in self.names if first_bad.get(n) == itr)
            raise NonFiniteError(self._message(name, itr))
        self._watch_growth(loss_max)

    def _message(self, name: str, itr: int) -> str:
        if name in ("observation", "reward"):
            env = f" ({self.env})" if self.env else ""
            return (
                f"the environment{env} returned a non-finite {name} (nan or inf) in iteration "
                f"{itr}; the run stops without saving (its checkpoints hold what came before)"
            )
        what = "parameter" if name == "parameters" else f"{name} (of the update)"
        return (
            f"a non-finite {what} (nan or inf) in iteration {itr}: training diverged (a lower "
            "learning rate, or gradient clipping, may help); the run stops without saving (its "
            "checkpoints hold what came before)"
        )

    def _watch_growth(self, loss_max: list[float]) -> None:
        for i, (field, value) in enumerate(zip(self.loss_fields, loss_max, strict=True)):
            first = self._first_loss[i]
            if first is None or self._warned:
                continue
            if isinstance(first, torch.Tensor):  # (read once in the run)
                first = self._first_loss[i] = float(first)
            if value > GROWTH_WARNING * max(first, 1.0):
                self._warned = True
                logger.log(
                    f"WARNING: {field} grew from {first:.3g} (its first value) to {value:.3g}: "
                    "training may be diverging (try a lower learning rate)."
                )
