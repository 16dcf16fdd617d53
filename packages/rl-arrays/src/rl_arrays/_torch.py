"""Optional torch: imported only by the helpers that need it, so a numpy-only install works."""

from __future__ import annotations

import sys
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from typing_extensions import TypeIs


def require_torch(what: str) -> ModuleType:
    """Return the torch module, or raise an ImportError naming ``what`` needed it."""
    try:
        import torch
    except ImportError as e:
        raise ImportError(
            f"{what} needs PyTorch, which is not installed; "
            "install it with `pip install torch` (or `pip install rl-arrays[torch]`)"
        ) from e
    return torch


def is_tensor(x: object) -> TypeIs[torch.Tensor]:
    """True for a torch.Tensor; never imports torch (a tensor implies torch is loaded)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)
