"""The ``compile`` option of every algorithm: compiled losses and, on CUDA, each variant of an
update (forward, backward, gradient clipping, optimizer step, target update) replayed as one
CUDA graph.

On a GPU most of a small network's update is Python and kernel launches. ``compile=True``
compiles the algorithm's loss functions with ``torch.compile(fullgraph=True)`` (a graph break
is an error that names its cause, not a silent slow path), and on CUDA captures each update
step once per variant (e.g. TD3's critic-only and critic-and-policy steps) and per input
layout, then replays it: the batch is copied into the graph's static inputs, the step's
outputs (its diagnostics, on the device) are copied out. A dict instead of True gives
``torch.compile``'s keyword arguments (e.g. ``{"backend": "aot_eager"}`` where no C++ compiler
is installed).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any, TypeVar

import torch

__all__ = [
    "UpdateSteps",
    "check_compile",
    "check_single_process",
    "compiled",
    "make_capturable",
]

FnT = TypeVar("FnT", bound=Callable[..., Any])

# Eager steps before a variant is captured: they build the optimizer's state, compile the
# losses and warm the libraries' caches, none of which may happen inside a capture.
_WARMUP_STEPS = 3
# torch.compile modes that capture CUDA graphs themselves.
_GRAPHED_MODES = ("reduce-overhead", "max-autotune")
# The oldest torch whose compiler takes every update here: 2.8's cannot trace PPO's twin MLP
# (a zip over its parameter lists), 2.4's most of them.
MIN_TORCH = (2, 11)


def check_compile(value: Any) -> dict[str, Any] | None:
    """The ``compile`` argument as ``torch.compile``'s keyword arguments, None when off."""
    if value is False or value is None:
        return None
    if not (value is True or (isinstance(value, dict) and all(isinstance(k, str) for k in value))):
        raise ValueError(
            "compile must be True, False or a dict of torch.compile's keyword arguments, "
            f"got {value!r}"
        )
    options = {} if value is True else dict(value)
    if "fullgraph" in options:
        raise ValueError("compile: fullgraph is always True (a graph break is an error)")
    if options.get("mode") in _GRAPHED_MODES:
        raise ValueError(
            f"compile: mode={options['mode']!r} makes CUDA graphs of its own, inside the "
            "update step's, which is already captured whole: leave mode out"
        )
    if tuple(int(part) for part in torch.__version__.split(".")[:2]) < MIN_TORCH:
        raise ValueError(
            f"compile needs torch {MIN_TORCH[0]}.{MIN_TORCH[1]} or newer, found "
            f"{torch.__version__}: older compilers cannot trace every model here; use "
            "compile=False or a newer torch"
        )
    return options


def check_single_process(options: dict[str, Any] | None, world_size: int) -> None:
    """Refuse compiling a run of several processes: their gradients are all-reduced by
    DistributedDataParallel's hooks during the backward pass, which a compiled update
    cannot hold in one graph."""
    if options is not None and world_size > 1:
        raise ValueError(
            f"compile=True trains in one process, got world_size={world_size}: the "
            "all-reduce of several processes' gradients cannot be compiled into the update "
            "(use compile=False, or one process)"
        )


def compiled(fn: FnT, options: dict[str, Any] | None, recurrent: bool = False) -> FnT:
    """``fn`` compiled in one graph with ``options`` (``check_compile``'s), or ``fn`` itself
    when they are None. ``recurrent``: the agent's RNN modules run between compiled graphs
    (torch.compile does not trace LSTMs and GRUs; a captured step still holds them)."""
    if options is None:
        return fn
    return torch.compile(fn, fullgraph=not recurrent, **options)  # type: ignore[return-value]


def make_capturable(optimizers: Sequence[torch.optim.Optimizer], what: str) -> None:
    """Ready the optimizers for a captured step: each capturable (torch refuses a step
    under capture otherwise, fused or not), its step counts and learning rates tensors on
    the parameters' device, the rates float32 and changed in place by the schedules (a
    captured step would read a float once, at capture). Also after loading a state saved
    elsewhere (a checkpoint loads on the CPU)."""
    for optimizer in optimizers:
        if "capturable" not in optimizer.defaults:
            raise ValueError(
                f"compile=True captures {what}'s optimizer step in a CUDA graph, which "
                f"{type(optimizer).__name__} cannot take part in (it has no capturable mode): "
                "use one that has (Adam, AdamW, RMSprop ...) or compile=False"
            )
        for group in optimizer.param_groups:
            device = group["params"][0].device
            group["capturable"] = True
            group["lr"] = torch.as_tensor(group["lr"], dtype=torch.float32, device=device)
            for param in group["params"]:
                step = optimizer.state.get(param, {}).get("step")
                if isinstance(step, torch.Tensor) and step.device != param.device:
                    optimizer.state[param]["step"] = step.to(param.device)


class UpdateSteps:
    """Runs ``step(variant, *inputs) -> tuple of tensors``: directly, or (``graphs=True``, a
    CUDA device) as CUDA graphs, one per variant and input layout, captured after
    ``_WARMUP_STEPS`` eager steps of it.

    ``step`` must read no tensor on the host, keep its inputs' shapes, set the gradients it
    takes to None before its backward pass (each capture then owns its gradients) and use a
    capturable optimizer (``make_capturable``). A capture that fails raises an error
    naming the algorithm and the cause. ``reset()`` drops the graphs: call it when the
    optimizers' state tensors are replaced (loading a state dict).
    """

    def __init__(self, step: Callable[..., tuple[torch.Tensor, ...]], what: str, graphs: bool):
        self.step, self.what, self.graphs = step, what, graphs
        self._captured: dict[Hashable, _Graph] = {}
        self._warm: dict[Hashable, int] = {}

    def __call__(self, variant: Hashable, *inputs: Any) -> tuple[torch.Tensor, ...]:
        if not self.graphs:
            return self.step(variant, *inputs)
        key = (variant, _layout(inputs))
        graph = self._captured.get(key)
        if graph is not None:
            return graph.replay(inputs)
        if self._warm.get(key, 0) < _WARMUP_STEPS:
            self._warm[key] = self._warm.get(key, 0) + 1
            return _on_side_stream(lambda: self.step(variant, *inputs))
        try:
            graph = _Graph(lambda *static: self.step(variant, *static), inputs)
        except Exception as e:  # (torch raises several kinds; each is told as it is)
            raise RuntimeError(
                f"compile=True: {self.what}'s update step could not be captured as a CUDA "
                f"graph ({type(e).__name__}: {e}); set compile=False to train eagerly"
            ) from e
        self._captured[key] = graph
        return graph.replay(inputs)

    def reset(self) -> None:
        self._captured.clear()
        self._warm.clear()

    def restart(self, optimizers: Sequence[torch.optim.Optimizer]) -> None:
        """After the optimizers' state was replaced (a state dict loaded): ``reset``, the
        graphs holding the old state, and the new state readied for capture."""
        self.reset()
        if self.graphs:
            make_capturable(optimizers, self.what)


class _Graph:
    """One captured step: static copies of its inputs, the graph, its static outputs."""

    def __init__(self, run: Callable[..., tuple[torch.Tensor, ...]], inputs: tuple[Any, ...]):
        # The inputs' own strides (a clone of a strided view would be contiguous, which the
        # compiled losses, traced on the warm-up inputs, would recompile for in the capture).
        self.static_inputs = _map(_strided_copy, inputs)
        self.graph = torch.cuda.CUDAGraph()
        torch.cuda.synchronize()
        with torch.cuda.graph(self.graph):
            self.static_outputs = run(*self.static_inputs)

    def replay(self, inputs: tuple[Any, ...]) -> tuple[torch.Tensor, ...]:
        """Copy ``inputs`` in, replay, and return copies of the outputs (the next replay
        overwrites the static ones)."""
        _copy(self.static_inputs, inputs)
        self.graph.replay()
        return _map(torch.clone, self.static_outputs)


def _strided_copy(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device).copy_(x)


def _on_side_stream(run: Callable[[], tuple[torch.Tensor, ...]]) -> tuple[torch.Tensor, ...]:
    """Warm-up steps run on a side stream, as torch asks before a capture."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        outputs = run()
    torch.cuda.current_stream().wait_stream(stream)
    return outputs


def _map(fn: Callable[[torch.Tensor], Any], x: Any) -> Any:
    """``fn`` on every tensor of a nest of (named) tuples; other leaves (None) kept."""
    if isinstance(x, torch.Tensor):
        return fn(x)
    if isinstance(x, tuple):
        items = [_map(fn, item) for item in x]
        return type(x)(*items) if hasattr(x, "_fields") else type(x)(items)
    return x


def _copy(static: Any, x: Any) -> None:
    if isinstance(static, torch.Tensor):
        static.copy_(x)
    elif isinstance(static, tuple):
        for s, item in zip(static, x, strict=True):
            _copy(s, item)


def _layout(x: Any) -> Hashable:
    """The structure, shapes, strides and dtypes of a nest of inputs: what a captured graph
    fixes."""
    if isinstance(x, torch.Tensor):
        return (tuple(x.shape), x.stride(), x.dtype)
    if isinstance(x, tuple):
        return (type(x).__name__, tuple(_layout(item) for item in x))
    return x if isinstance(x, Hashable) else type(x).__name__
