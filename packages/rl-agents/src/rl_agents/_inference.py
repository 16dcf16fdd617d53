"""``export_policy``: a deployable policy (``_policies``: ``agent.inference_policy()``)
written to a file as TorchScript or ONNX, traced on an example batch, written whole or not
at all; and the forms of the policies that TorchScript compiles.
"""

import contextlib
import os
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from ._base_agent import BaseAgent
from ._policies import InferencePolicy, RecurrentInferencePolicy

__all__ = ["export_policy"]

_FORMATS = ("torchscript", "onnx")
_ONNX_EXTRA = "pip install 'rl-agents[onnx]'"


# The forms written by export_policy: TorchScript compiles ``forward`` and what it calls,
# and ``reset`` only when marked for export. The mark is set here, not on the Python
# policies, because tracing a module with a method marked for export compiles (and then
# needs TorchScript-readable annotations in) every module inside it.


class _ExportedInferencePolicy(InferencePolicy):
    @torch.jit.export
    def reset(self, env_mask: torch.Tensor | None = None) -> None:
        """Nothing to forget (feed-forward)."""


class _ExportedRecurrentInferencePolicy(RecurrentInferencePolicy):
    @torch.jit.export
    def reset(self, env_mask: torch.Tensor | None = None) -> None:
        """Zero the state of every environment, or of those where ``env_mask`` is set."""
        self._reset(env_mask)


_Policy = InferencePolicy | RecurrentInferencePolicy


def _policy_of(agent_or_policy: BaseAgent | _Policy) -> _Policy:
    if isinstance(agent_or_policy, (InferencePolicy, RecurrentInferencePolicy)):
        return agent_or_policy
    make = getattr(agent_or_policy, "inference_policy", None)
    if make is None:
        raise TypeError(
            "export_policy needs an agent with inference_policy() or the InferencePolicy / "
            f"RecurrentInferencePolicy it returns, got {type(agent_or_policy).__name__}"
        )
    return make()


def _device_of(policy: torch.nn.Module) -> torch.device:
    for tensor in (*policy.parameters(), *policy.buffers()):
        return tensor.device
    return torch.device("cpu")


def _example(policy: _Policy, example_observation: Any) -> torch.Tensor:
    """The example observation batch: as given (checked), or one zero observation."""
    device = _device_of(policy)
    shape = tuple(policy.observation_shape)
    if example_observation is None:
        return torch.zeros((1, *shape), dtype=policy.observation_dtype, device=device)
    example = torch.as_tensor(example_observation, device=device)
    if example.ndim != len(shape) + 1 or tuple(example.shape[1:]) != shape:
        raise ValueError(
            f"example_observation must be a batch [B, {', '.join(map(str, shape))}] of "
            f"observations, got shape {tuple(example.shape)}"
        )
    if example.shape[0] < 1:
        raise ValueError("example_observation must hold at least one observation")
    return example


def _require_onnx() -> None:
    try:
        import onnx  # noqa: F401
        import onnxscript  # noqa: F401 (torch's ONNX exporter translates with it)
    except ImportError as e:
        raise ImportError(
            "export_policy(format='onnx') needs the onnx and onnxscript packages, which are "
            f"not installed; install rl-agents' onnx extra: {_ONNX_EXTRA}"
        ) from e


def _example_args(policy: _Policy, observation: torch.Tensor) -> tuple[torch.Tensor, ...]:
    if isinstance(policy, InferencePolicy):
        return (observation,)
    batch = observation.shape[0]
    h = torch.zeros((policy.num_layers, batch, policy.hidden_size), dtype=policy.h.dtype)
    action = torch.zeros((batch, *policy.action_shape), dtype=policy.prev_action.dtype)
    reward = torch.zeros(batch, dtype=policy.h.dtype)
    return tuple(x.to(observation.device) for x in (observation, h, h.clone(), action, reward))


def _atomic(path: Path, write: Callable[[Path], object]) -> None:
    """``write(temporary path)``, then rename it to ``path`` (nothing half-written)."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def _quiet_jit() -> Iterator[None]:
    """Silences what tracing says about our models by design (Python ints read from shapes:
    the batch size is fixed, which the exported module checks) and TorchScript's
    deprecation notices."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
        warnings.filterwarnings("ignore", message=r".*torch\.jit\.\w+.* is deprecated")
        yield


def _export_torchscript(policy: _Policy, args: tuple[torch.Tensor, ...], path: Path) -> None:
    batch = int(args[0].shape[0])
    with _quiet_jit():
        traced = torch.jit.trace(policy.core, args)
        if isinstance(policy, InferencePolicy):
            wrapper: torch.nn.Module = _ExportedInferencePolicy(
                traced, policy.observation_shape, policy.observation_dtype, batch_size=batch
            )
        else:
            wrapper = _ExportedRecurrentInferencePolicy(
                traced,
                policy.num_layers,
                policy.hidden_size,
                policy.action_shape,
                policy.prev_action.dtype,
                policy.observation_shape,
                policy.observation_dtype,
                batch_size=batch,
                state_dtype=policy.h.dtype,
                device=args[0].device,
            )
        scripted = torch.jit.script(wrapper)
        _atomic(path, lambda tmp: torch.jit.save(scripted, str(tmp)))


def _export_onnx(policy: _Policy, args: tuple[torch.Tensor, ...], path: Path) -> None:
    if isinstance(policy, InferencePolicy):
        names, outputs = ["observation"], ["action"]
    else:
        names = ["observation", "h", "c", "prev_action", "prev_reward"]
        outputs = ["action", "h_out", "c_out"]
    with warnings.catch_warnings():
        # torch.export notes that nn.LSTM re-assigns its flat weights while exporting.
        warnings.filterwarnings("ignore", message=r".*were assigned during export.*")
        _atomic(
            path,
            lambda tmp: torch.onnx.export(
                policy.core,
                args,
                str(tmp),
                input_names=names,
                output_names=outputs,
                dynamo=True,
                external_data=False,
                verbose=False,
            ),
        )


def export_policy(
    agent_or_policy: BaseAgent | InferencePolicy | RecurrentInferencePolicy,
    path: str | os.PathLike,
    format: str = "torchscript",
    example_observation: Any = None,
) -> Path:
    """Write the deterministic policy of an agent (or of its ``inference_policy()``) to
    ``path`` as ``format`` ``"torchscript"`` (load with ``torch.jit.load``) or ``"onnx"``
    (needs the ``onnx`` extra). Returns the path.

    The module is traced on ``example_observation`` (a batch ``[B, ...]``; default one zero
    observation) and serves batches of that size only. A TorchScript module keeps a recurrent
    state inside; an ONNX graph takes it and returns the next one (inputs and outputs: the
    package README). TorchScript is deprecated upstream; ONNX is the format with a future.
    """
    if format not in _FORMATS:
        raise ValueError(f"format must be one of {_FORMATS}, got {format!r}")
    if format == "onnx":
        _require_onnx()
    policy = _policy_of(agent_or_policy)
    if getattr(policy, "dict_observation", False):
        raise ValueError(
            "export_policy: a policy of Dict observations (or of an action mask) cannot be "
            "exported: TorchScript and ONNX graphs here take one observation tensor"
        )
    path = Path(path)
    if not path.parent.is_dir():
        raise FileNotFoundError(f"the folder of {str(path)!r} does not exist")
    args = _example_args(policy, _example(policy, example_observation))
    if format == "torchscript":
        _export_torchscript(policy, args, path)
    else:
        _export_onnx(policy, args, path)
    return path
