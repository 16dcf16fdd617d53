"""Files that readers may open at any moment (progress monitors, other runs)."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to a temporary file beside ``path``, then rename it over ``path``: a
    reader sees the old file or the new one, never half of one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return path


def write_json_atomic(path: str | os.PathLike, data: Any, what: str) -> Path:
    """``data`` as indented JSON; ``what`` names it in the error when it is not JSON."""
    try:
        text = json.dumps(data, indent=2, sort_keys=True) + "\n"
    except (TypeError, ValueError) as e:
        raise TypeError(
            f"{what} must hold only JSON values (dict, list, str, number, bool, None): {e}"
        ) from e
    return write_text_atomic(path, text)
