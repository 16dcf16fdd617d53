"""Small helpers for models: conv output shapes, gradient scaling, state-dict and target
updates, DistributedDataParallel wrapping, mode switches."""

from __future__ import annotations

import inspect
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, cast

import torch
from torch.nn.parallel import DistributedDataParallel

__all__ = [
    "ScaleGrad",
    "conv2d_output_shape",
    "scale_grad",
    "strip_ddp_state_dict",
    "update_state_dict",
]

_DDP_PREFIX = "module."
# DistributedDataParallel's option not to broadcast buffers at every forward pass, as named
# since torch 2.13 (before: broadcast_buffers, now deprecated).
_NO_FORWARD_BUFFER_SYNC: dict[str, Any] = (
    {"forward_sync_buffers": False}
    if "forward_sync_buffers" in inspect.signature(DistributedDataParallel).parameters
    else {"broadcast_buffers": False}
)
_MODULE_TRAIN = torch.nn.Module.train


def _pair(value: Any) -> tuple[int, int]:
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise ValueError(f"expected an int or a pair of ints, got {value!r}")
        return int(value[0]), int(value[1])
    return int(value), int(value)


def conv2d_output_shape(
    h: int, w: int, kernel_size: Any = 1, stride: Any = 1, padding: Any = 0, dilation: Any = 1
) -> tuple[int, int]:
    """Output (H, W) of a convolution or pooling layer on an (h, w) input; each setting is an
    int or an (h, w) pair, as in ``torch.nn.Conv2d``."""
    kernel, strides, pads, dils = (_pair(v) for v in (kernel_size, stride, padding, dilation))
    out = tuple(
        (size + 2 * pad - dil * (k - 1) - 1) // s + 1
        for size, k, s, pad, dil in zip((h, w), kernel, strides, pads, dils, strict=True)
    )
    return out[0], out[1]


class ScaleGrad(torch.autograd.Function):
    """Identity on the forward pass; multiplies the gradient by ``scale`` on the way back
    (e.g. a dueling DQN head scales the gradient into the shared conv layers)."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.scale = scale
        return tensor.view_as(tensor)

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad_output * ctx.scale, None


scale_grad = ScaleGrad.apply


def lstm_dtype(lstm: torch.nn.LSTM) -> torch.dtype:
    """The dtype of an LSTM's weights (the first layer's input weights)."""
    # torch.nn.LSTM registers weight_ih_l0 ... by name at run time: typed only as an attribute
    # of a Module (a tensor or a module).
    return cast(torch.Tensor, lstm.weight_ih_l0).dtype


def set_training_mode(module: torch.nn.Module, mode: bool) -> None:
    """What ``module.train(mode)`` does, in a third of its time: the flag is written on every
    submodule directly, unless one overrides ``train`` (then ``module.train(mode)`` runs).
    Runners (and samplers) switch modes up to three times per iteration, and with one env
    step per iteration (DDPG, TD3, SAC) ``train``'s walk through ``__setattr__`` took over a
    tenth of a small network's step."""
    modules, i = [module], 0
    while i < len(modules):  # (Module.modules() is several times slower: names, a memo)
        modules.extend(modules[i].children())
        i += 1
    if any(type(m).train is not _MODULE_TRAIN for m in modules):
        module.train(mode)
        return
    for m in modules:
        m.__dict__["training"] = mode


def strip_ddp_state_dict(state_dict: Mapping[str, Any]) -> OrderedDict[str, Any]:
    """The state dict with DistributedDataParallel's ``module.`` key prefix removed, so a
    wrapped model's parameters load into an unwrapped one (keys without it are kept)."""
    return OrderedDict(
        (key[len(_DDP_PREFIX) :] if key.startswith(_DDP_PREFIX) else key, value)
        for key, value in state_dict.items()
    )


def wrap_data_parallel(model: torch.nn.Module, device: torch.device) -> DistributedDataParallel:
    """``model`` in DistributedDataParallel (on ``device``'s GPU, if it is one), without
    buffers broadcast at each forward pass (``BaseAgent.data_parallel`` says why)."""
    if device.type == "cuda":
        index = device.index
        return DistributedDataParallel(
            model, device_ids=[index], output_device=index, **_NO_FORWARD_BUFFER_SYNC
        )
    return DistributedDataParallel(model, **_NO_FORWARD_BUFFER_SYNC)


@torch.no_grad()
def update_state_dict(
    model: torch.nn.Module, state_dict: Mapping[str, Any], tau: float = 1, strip_ddp: bool = True
) -> None:
    """Move ``model`` towards ``state_dict`` (same keys): ``tau == 1`` copies it (a hard
    target-network update), ``0 < tau < 1`` sets every floating-point entry to
    ``tau * new + (1 - tau) * old`` in place (a soft update); other entries (integer
    counters) are copied. ``tau == 0`` leaves the model unchanged."""
    if not 0 <= tau <= 1:
        raise ValueError(f"tau must lie in [0, 1], got {tau!r}")
    if strip_ddp:
        state_dict = strip_ddp_state_dict(state_dict)
    if tau == 1:
        model.load_state_dict(state_dict)
        return
    if tau == 0:
        return
    own = model.state_dict()
    missing, unexpected = own.keys() - state_dict.keys(), state_dict.keys() - own.keys()
    if missing or unexpected:
        raise KeyError(
            f"update_state_dict: keys differ from the model's (missing {sorted(missing)}, "
            f"unexpected {sorted(unexpected)})"
        )
    for key, value in own.items():
        new = state_dict[key].to(device=value.device, dtype=value.dtype)
        if value.is_floating_point():
            value.lerp_(new, tau)
        else:
            value.copy_(new)


@torch.no_grad()
def polyak_update(pairs: list[tuple[torch.nn.Module, torch.nn.Module]], tau: float) -> None:
    """Move each target module towards its online module (same architecture): floating-point
    parameters and buffers become ``tau * online + (1 - tau) * target``, all of them in one
    ``torch._foreach_lerp_`` (``update_state_dict`` makes one call per entry, after building
    both state dicts); other buffers (integer counters) are copied. ``tau=1`` copies
    everything, ``tau=0`` changes nothing. Every agent's ``update_target`` uses it."""
    if not 0 <= tau <= 1:
        raise ValueError(f"tau must lie in [0, 1], got {tau!r}")
    if tau == 0:
        return
    targets, onlines = [], []
    for target, online in pairs:
        target_entries = [*target.parameters(), *target.buffers()]
        online_entries = [*online.parameters(), *online.buffers()]
        for t, o in zip(target_entries, online_entries, strict=True):
            if tau == 1 or not t.is_floating_point():
                t.copy_(o)
            else:
                targets.append(t)
                onlines.append(o)
    if targets:
        torch._foreach_lerp_(targets, onlines, tau)
