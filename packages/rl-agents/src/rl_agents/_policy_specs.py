"""What an agent's deployable policy takes, returns and keeps, read from the agent: the
observation's and the action's shapes and dtypes, and a recurrent model's state layout."""

from typing import Any

import torch

from rl_arrays import EnvSpaces

from ._base_agent import BaseAgent

__all__ = [
    "ActionSpec",
    "action_spec_of",
    "model_and_spaces",
    "observation_spec_of",
    "recurrent_state_spec",
]


def _torch_dtype(dtype: Any, default: torch.dtype = torch.float32) -> torch.dtype:
    """A space's dtype (numpy or torch) as a torch dtype; ``default`` when unknown."""
    if isinstance(dtype, torch.dtype):
        return dtype
    name = getattr(dtype, "name", None) or (dtype if isinstance(dtype, str) else None)
    candidate = getattr(torch, str(name), None) if name else None
    return candidate if isinstance(candidate, torch.dtype) else default


def observation_spec_of(space: Any, actor_part: bool) -> tuple[tuple[int, ...], torch.dtype]:
    """(shape, dtype) of one environment's observation (``actor_part``: of its actor part)."""
    shape = getattr(space, "shape", None)
    if actor_part:
        shape = getattr(shape, "actor", None)
    if shape is None:
        raise ValueError(f"the observation space has no usable shape: {space!r}")
    dtype = getattr(space, "dtype", None)
    if actor_part:
        dtype = getattr(dtype, "actor", dtype)
    return tuple(int(s) for s in shape), _torch_dtype(dtype)


ActionSpec = tuple[tuple[int, ...], torch.dtype, int]


def action_spec_of(agent: BaseAgent, env_spaces: EnvSpaces) -> ActionSpec:
    """(shape, dtype, one-hot size or 0) of one environment's action as the policy keeps
    it; the one-hot size is the number of actions when the agent hands its model one-hot
    previous actions (``onehot_prev_action``)."""
    space = env_spaces.action
    n = getattr(space, "n", None)
    if n is None:
        return (int(space.shape[0]),), torch.float32, 0
    return (), torch.int64, int(n) if getattr(agent, "onehot_prev_action", False) else 0


def model_and_spaces(agent: BaseAgent) -> tuple[torch.nn.Module, EnvSpaces]:
    """The agent's model (unwrapped) and its environment's spaces."""
    if agent.model is None or agent.env_spaces is None:
        raise RuntimeError(f"{type(agent).__name__} has no model yet: call initialize() first")
    return agent._plain_model(), agent.env_spaces


def recurrent_state_spec(
    model: torch.nn.Module,
    encoder: torch.nn.Module,
    observation_shape: tuple[int, ...],
    action_spec: ActionSpec,
    device: torch.device,
) -> tuple[int, int, torch.dtype]:
    """(num_layers, hidden_size, dtype) of a recurrent model's state, from one step of the
    model from zeros (``encoder``: the previous action as the model takes it)."""
    action_shape, action_dtype, _ = action_spec
    with torch.no_grad():
        outputs = model(
            torch.zeros((1, *observation_shape), device=device),
            encoder(torch.zeros((1, *action_shape), dtype=action_dtype, device=device)),
            torch.zeros(1, device=device),
            None,
        )
    state = outputs[-1]
    fields = tuple(state)
    if len(fields) != 2 or fields[0].ndim != 3:
        raise TypeError(
            "a recurrent inference policy needs a model whose state is an (h, c) pair in "
            f"[num_layers, B, hidden_size] layout (as RnnState), got {type(state).__name__}"
        )
    h = fields[0]
    return int(h.shape[0]), int(h.shape[2]), h.dtype
