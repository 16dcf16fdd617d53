"""Action masking: an observation with an ``action_mask`` field (gymnasium's and PettingZoo's
convention: a ``Dict`` observation whose ``"action_mask"`` is 1 where an action is allowed)
makes the agent's model an ``ActionMaskedModel``, so that every forward pass (sampling,
training, the target network, the inference policy) puts no probability on, and takes no
maximum over, an action the mask forbids."""

from __future__ import annotations

from typing import Any

import torch

from rl_arrays import EnvSpaces

__all__ = ["MASK_FIELD", "ActionMaskedModel", "action_mask_of", "model_env_spaces"]

MASK_FIELD = "action_mask"

# Where masks apply: "probs" (the first output, action probabilities, renormalised over the
# allowed actions) or "q" (the first output, Q-values, forbidden ones set to the lowest float).
MASK_KINDS = ("probs", "q")


def _fields(space: Any) -> tuple[str, ...]:
    """The field names of a composite space (rl-samplers' ``Composite``), else ()."""
    names = getattr(space, "names", None)
    return tuple(names) if isinstance(names, tuple) and hasattr(space, "spaces") else ()


def is_action_masked(env_spaces: EnvSpaces) -> bool:
    """Whether the observations carry an ``action_mask`` field."""
    return MASK_FIELD in _fields(env_spaces.observation)


def model_env_spaces(env_spaces: EnvSpaces) -> EnvSpaces:
    """The spaces the model sees: without an action mask, ``env_spaces``; with one, its
    observation is the one other field (a plain vector or image), or the composite itself
    when several fields remain (a ``Dict`` model skips the mask field)."""
    names = _fields(env_spaces.observation)
    if MASK_FIELD not in names:
        return env_spaces
    n = getattr(env_spaces.action, "n", None)
    mask_space = env_spaces.observation.spaces[names.index(MASK_FIELD)]
    if n is None or tuple(mask_space.shape) != (int(n),):
        raise ValueError(
            f"the observation's {MASK_FIELD!r} must be one flag per discrete action, shape "
            f"({n},), got shape {tuple(mask_space.shape)} for action space {env_spaces.action!r}"
        )
    rest = [i for i, name in enumerate(names) if name != MASK_FIELD]
    if not rest:
        raise ValueError(f"the observation has nothing but its {MASK_FIELD!r}")
    if len(rest) == 1:
        return EnvSpaces(env_spaces.observation.spaces[rest[0]], env_spaces.action)
    return env_spaces


def action_mask_of(observation: Any) -> torch.Tensor:
    """The ``action_mask`` field of an observation as a bool tensor."""
    return torch.as_tensor(getattr(observation, MASK_FIELD)) != 0


def _model_observation(observation: Any) -> Any:
    """What the wrapped model gets: the one field beside the mask, or the whole observation."""
    fields = [f for f in observation._fields if f != MASK_FIELD]
    return getattr(observation, fields[0]) if len(fields) == 1 else observation


def masked_probs(prob: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``prob`` renormalised over the allowed actions: the softmax of the allowed logits.
    Where no allowed action has any probability left (underflow, or an all-false mask),
    uniform over the allowed actions (zeros when none is)."""
    kept = prob * mask
    total = kept.sum(-1, keepdim=True)
    uniform = mask / mask.sum(-1, keepdim=True).clamp_min(1)
    return torch.where(total > 0, kept / total.clamp_min(torch.finfo(kept.dtype).tiny), uniform)


def masked_q(q: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``q`` with the forbidden actions at the lowest finite value: never the argmax or the
    max while any action is allowed; finite, so a terminal step's ``(1 - done) * max`` stays 0."""
    return q.masked_fill(~mask, torch.finfo(q.dtype).min)


class ActionMaskedModel(torch.nn.Module):
    """``model`` with the observation's ``action_mask`` applied to its first output (``kind``
    "probs" or "q", see ``MASK_KINDS``); the model gets the observation without the mask.
    ``forward(observation, *rest)`` returns what ``model`` does, masked."""

    def __init__(self, model: torch.nn.Module, kind: str):
        super().__init__()
        if kind not in MASK_KINDS:
            raise ValueError(f"kind must be one of {MASK_KINDS}, got {kind!r}")
        self.model = model
        self.kind = kind
        self.normalize_observation = bool(getattr(model, "normalize_observation", False))

    def forward(self, observation: Any, *rest: Any) -> Any:
        output = self.model(_model_observation(observation), *rest)
        first = output[0] if isinstance(output, tuple) else output
        mask = action_mask_of(observation).to(first.device)
        first = masked_probs(first, mask) if self.kind == "probs" else masked_q(first, mask)
        return (first, *output[1:]) if isinstance(output, tuple) else first

    def update_obs_rms(self, observation: Any) -> None:
        self.model.update_obs_rms(_model_observation(observation))  # type: ignore[operator]

    def gradient_groups(self) -> list[list[torch.Tensor]]:
        groups = getattr(self.model, "gradient_groups", None)
        if groups is None:
            raise TypeError(f"{type(self.model).__name__} has no gradient_groups()")
        return groups()
