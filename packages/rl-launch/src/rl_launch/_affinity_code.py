"""Affinity codes: every ``encode_affinity`` argument, resolved (``AffinitySpec``) and
checked, written as a short string of ``<token><int>`` fields (a command-line argument) and
read back."""

from __future__ import annotations

import numbers
import re
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

__all__ = [
    "AffinitySpec",
    "check_int",
    "check_spec",
    "decode_code",
    "encode_code",
    "with_int_counts",
]


@dataclass(frozen=True)
class AffinitySpec:
    """Every ``encode_affinity`` argument, resolved (no None left), in code order."""

    n_cpu_core: int
    n_gpu: int
    contexts_per_gpu: int
    gpu_per_run: int
    cpu_per_run: int  # 0 with GPUs: a run's cores then follow from the GPUs (rlpyt ignores it)
    cpu_per_worker: int
    cpu_reserved: int
    hyperthread_offset: int
    n_socket: int
    async_sample: bool
    sample_gpu_per_run: int
    optim_sample_share_gpu: bool
    alternating: bool
    set_affinity: bool


# The token that stands for each argument in a code: "<token><int>", joined by "_".
_TOKENS = {
    "n_cpu_core": "cpu",
    "n_gpu": "gpu",
    "contexts_per_gpu": "cxg",
    "gpu_per_run": "gpr",
    "cpu_per_run": "cpr",
    "cpu_per_worker": "cpw",
    "cpu_reserved": "res",
    "hyperthread_offset": "hto",
    "n_socket": "skt",
    "async_sample": "async",
    "sample_gpu_per_run": "sgr",
    "optim_sample_share_gpu": "share",
    "alternating": "alt",
    "set_affinity": "pin",
}
_SLOT_TOKEN = "slot"
_BOOLS = {f.name for f in fields(AffinitySpec) if f.type in ("bool", bool)}


def encode_code(spec: AffinitySpec, run_slot: int | None) -> str:
    tokens = [f"{_SLOT_TOKEN}{run_slot}"] if run_slot is not None else []
    tokens += [f"{_TOKENS[name]}{int(value)}" for name, value in asdict(spec).items()]
    return "_".join(tokens)


def decode_code(code: str) -> tuple[AffinitySpec, int | None]:
    """The spec and run slot of a code, unchecked (``slot_layout`` checks the spec, so that a
    hand-edited code gets the same errors as ``encode_affinity``'s arguments)."""
    if not isinstance(code, str):
        raise TypeError(f"affinity code must be a str, got {type(code).__name__}")
    names = {token: name for name, token in _TOKENS.items()}
    values: dict[str, int] = {}
    run_slot = None
    for token in code.split("_"):
        match = re.fullmatch(r"([a-z]+)([0-9]+)", token)
        if match is None:
            raise ValueError(f"affinity code {code!r}: {token!r} is not <name><number>")
        key, number = match.group(1), int(match.group(2))
        if key == _SLOT_TOKEN:
            run_slot = number
        elif key in names and names[key] not in values:
            values[names[key]] = number
        else:
            raise ValueError(f"affinity code {code!r}: unknown or repeated field {key!r}")
    missing = [_TOKENS[name] for name in _TOKENS if name not in values]
    if missing:
        raise ValueError(f"affinity code {code!r} lacks {', '.join(missing)}")
    spec = {k: bool(v) if k in _BOOLS else v for k, v in values.items()}
    return AffinitySpec(**spec), run_slot  # type: ignore[arg-type]  # (bools: bool fields)


def check_int(name: str, value: Any, minimum: int) -> int:
    """``value`` as an int >= ``minimum``: an int, or an integral float such as ``8.0`` or
    ``1e3`` (rlpyt's way of writing counts); the same test as ``rl_arrays.as_count``."""
    count = None
    if isinstance(value, bool):
        pass
    elif isinstance(value, numbers.Integral):
        count = int(value)
    elif isinstance(value, numbers.Real) and float(value).is_integer():  # not nan nor inf
        count = int(float(value))
    if count is None or count < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return count


# The int fields of a spec and their least values.
_INT_MINIMUMS = (
    ("n_cpu_core", 1),
    ("n_gpu", 0),
    ("contexts_per_gpu", 1),
    ("gpu_per_run", 1),
    ("cpu_per_run", 0),
    ("cpu_per_worker", 1),
    ("cpu_reserved", 0),
    ("hyperthread_offset", 0),
    ("n_socket", 1),
    ("sample_gpu_per_run", 0),
)


def with_int_counts(spec: AffinitySpec) -> AffinitySpec:
    """``spec`` with ints for its integral floats such as 8.0 (rlpyt's scripts write counts
    as floats); a ValueError names the first count that is not one."""
    counts: dict[str, Any] = {n: check_int(n, getattr(spec, n), low) for n, low in _INT_MINIMUMS}
    return replace(spec, **counts)


def check_spec(s: AffinitySpec) -> None:
    """Refuse arguments that contradict each other (before any layout is attempted)."""
    for name, minimum in _INT_MINIMUMS:
        check_int(name, getattr(s, name), minimum)
    for name in _BOOLS:
        if not isinstance(getattr(s, name), bool):
            raise ValueError(f"{name} must be a bool, got {getattr(s, name)!r}")
    if 0 < s.hyperthread_offset < s.n_cpu_core:
        raise ValueError(
            f"hyperthread_offset={s.hyperthread_offset} is less than n_cpu_core={s.n_cpu_core}: "
            "the hyperthreads' cpu ids would be cores' ids (use 0 for no hyperthreads)"
        )
    if s.n_cpu_core % s.n_socket:
        raise ValueError(f"n_cpu_core={s.n_cpu_core} is not a multiple of n_socket={s.n_socket}")
    if s.hyperthread_offset > s.n_cpu_core and s.hyperthread_offset % s.n_socket:
        raise ValueError(
            f"hyperthread_offset={s.hyperthread_offset} (the machine's cores) is not a multiple "
            f"of n_socket={s.n_socket}"
        )
    if not s.async_sample:
        for name, default in (("sample_gpu_per_run", 0), ("optim_sample_share_gpu", False)):
            if getattr(s, name) != default:
                raise ValueError(f"{name}={getattr(s, name)!r} applies only with async_sample=True")
    if s.n_gpu == 0:
        for name, default in (
            ("contexts_per_gpu", 1),
            ("gpu_per_run", 1),
            ("sample_gpu_per_run", 0),
            ("optim_sample_share_gpu", False),
        ):
            if getattr(s, name) != default:
                raise ValueError(f"{name}={getattr(s, name)!r} needs GPUs, but n_gpu=0")
        if s.cpu_per_run == 0:
            raise ValueError("cpu_per_run must be an int >= 1 without GPUs, got 0")
        if s.cpu_per_run > s.n_cpu_core:
            raise ValueError(
                f"cpu_per_run={s.cpu_per_run} is more than the n_cpu_core={s.n_cpu_core} cores"
            )
        return
    if s.cpu_per_run:
        raise ValueError(
            f"cpu_per_run={s.cpu_per_run} applies only without GPUs (n_gpu=0); with GPUs the "
            "cores are split evenly over the run slots, which the GPUs decide"
        )
    if s.gpu_per_run > s.n_gpu:
        raise ValueError(f"gpu_per_run={s.gpu_per_run} is more than the n_gpu={s.n_gpu} GPUs")
    if s.contexts_per_gpu > 1 and (s.gpu_per_run > 1 or s.async_sample):
        raise ValueError(
            f"contexts_per_gpu={s.contexts_per_gpu} (runs sharing a GPU) needs gpu_per_run=1 "
            "and async_sample=False"
        )
    if s.async_sample:
        if s.sample_gpu_per_run > 1:
            raise ValueError(
                f"sample_gpu_per_run={s.sample_gpu_per_run}: the async samplers run one action "
                "server, on one GPU (rlpyt's several action-server GPUs per run are not "
                "supported); use 1, 0 (a CPU sampler) or optim_sample_share_gpu=True"
            )
        if s.optim_sample_share_gpu and s.sample_gpu_per_run == 0:
            raise ValueError(
                "optim_sample_share_gpu=True needs sample_gpu_per_run=1 (the sampler's GPU "
                "is then the optimizer's first)"
            )
        gpus = s.gpu_per_run + (0 if s.optim_sample_share_gpu else s.sample_gpu_per_run)
        if gpus > s.n_gpu:
            raise ValueError(
                f"gpu_per_run={s.gpu_per_run} + sample_gpu_per_run={s.sample_gpu_per_run} is "
                f"{gpus} GPUs per run, more than the n_gpu={s.n_gpu} GPUs"
            )
