"""The checks of a replay buffer's options that concern more than one of them: priority
settings without ``prioritized``, a ``device`` with host-only storage, the sum tree's place."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _device

if TYPE_CHECKING:
    import torch

__all__ = ["priority_settings", "storage_device", "with_tree_device"]


def priority_settings(owner: str, prioritized: bool, **given: Any) -> dict[str, Any]:
    """The priority settings given (not None), refused unless ``prioritized``."""
    settings = {name: value for name, value in given.items() if value is not None}
    if settings and not prioritized:
        raise ValueError(
            f"{', '.join(settings)} only apply with prioritized=True "
            f"({owner} has prioritized=False)"
        )
    return settings


def storage_device(device: Any, frame_based: bool, shared_memory: bool) -> torch.device | None:
    """``device`` normalised (None: numpy on the host), refused with host-only storage."""
    if device is None:
        return None
    normalised = _device.as_device(device)
    if frame_based or shared_memory:
        option = "frame_based" if frame_based else "shared_memory"
        raise ValueError(
            f"device={device!r} cannot be combined with {option}=True: frame and "
            "shared-memory buffers stay numpy on the host (store whole observations, "
            "or use device=None)"
        )
    return normalised


def with_tree_device(settings: dict[str, Any], device: torch.device | None) -> dict[str, Any]:
    """The ``Prioritizer``'s settings: ``tree_on_device=True`` becomes ``tree_device``, the
    storage's ``device``."""
    settings = dict(settings)
    if settings.pop("tree_on_device", False):
        if device is None:
            raise ValueError(
                "tree_on_device=True needs device= (the storage's device, which the sum tree joins)"
            )
        if settings.get("unique"):
            raise ValueError("tree_on_device=True cannot draw unique samples (unique=True)")
        settings["tree_device"] = device
    return settings
