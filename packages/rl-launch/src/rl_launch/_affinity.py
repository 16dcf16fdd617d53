"""Hardware affinity: split a machine's cores (and GPUs) into run slots, and say which cpus,
torch threads and GPU each process of a run uses.

The machine model is rlpyt's: the machine has ``max(n_cpu_core, hyperthread_offset)`` physical
cores numbered in order, socket by socket; the ``n_cpu_core`` used are split evenly over the
``n_socket`` sockets, the first ones of each; core ``c``'s second hardware thread (if used) is
``c + hyperthread_offset``.  ``encode_affinity`` turns the resources and the share of each run
into a short code (a command-line argument); ``affinity_from_code`` turns a code that names a
run slot into the dicts the samplers and runners read. The codes themselves are
``_affinity_code``'s; which cores and GPUs each process of a run slot gets, ``_slot_layout``'s.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, NamedTuple

import psutil

from ._affinity_code import AffinitySpec, check_int, decode_code, encode_code, with_int_counts
from ._slot_layout import RunSlot, SlotProcess, logical_cpus, slot_layout

__all__ = [
    "AffinityDict",
    "Hardware",
    "affinity_from_code",
    "detect_hardware",
    "encode_affinity",
    "make_affinity",
    "n_run_slots",
    "visible_gpu_count",
]

_SYS_CPU = Path("/sys/devices/system/cpu")
_NVIDIA_GPUS = Path("/proc/driver/nvidia/gpus")


class AffinityDict(dict):
    """A dict whose keys are also attributes (``affinity.cuda_idx``); it pickles as a dict."""

    __slots__ = ()

    def __getattr__(self, key: str) -> Any:
        try:
            return self[key]
        except KeyError:
            raise AttributeError(f"the affinity has no key {key!r}") from None


# ----------------------------------------------------------------------------- the machine
class Hardware(NamedTuple):
    """What ``detect_hardware`` found (the defaults of ``encode_affinity``)."""

    n_cpu_core: int  # physical cores
    hyperthread_offset: int  # core c's second thread is c + offset; 0: none usable
    n_socket: int
    n_gpu: int | None  # visible NVIDIA GPUs; None when it cannot be told without torch


def _cpu_list(text: str) -> set[int]:
    """Parse a kernel cpu list such as ``0-3,8,10-11``."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if part:
            first, _, last = part.partition("-")
            cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def _topology(cpu: int, name: str) -> str | None:
    try:
        return (_SYS_CPU / f"cpu{cpu}" / "topology" / name).read_text()
    except OSError:
        return None


def _detect_hyperthread_offset(n_core: int, n_logical: int) -> int:
    """``n_core`` when every core ``c`` is paired with thread ``c + n_core`` (the usual Linux
    numbering); 0 when there are no hyperthreads or they are numbered some other way (then
    only one thread per core is used)."""
    if n_logical != 2 * n_core:
        return 0
    for core in range(n_core):
        siblings = _topology(core, "thread_siblings_list")
        if siblings is None or _cpu_list(siblings) != {core, core + n_core}:
            return 0
    return n_core


def _detect_n_socket(n_core: int) -> int:
    """The sockets, when core ``c`` sits on socket ``c // (n_core / n_socket)``; else 1 (the
    layout then ignores sockets rather than trust a numbering it does not understand)."""
    packages = [_topology(core, "physical_package_id") for core in range(n_core)]
    if None in packages:
        return 1
    ids = [int(p) for p in packages if p is not None]
    order = list(dict.fromkeys(ids))
    n_socket = len(order)
    if n_core % n_socket:
        return 1
    per_socket = n_core // n_socket
    if any(order.index(ids[core]) != core // per_socket for core in range(n_core)):
        return 1
    return n_socket


def visible_gpu_count() -> int | None:
    """NVIDIA GPUs this process may use, found without torch: the entries of
    ``CUDA_VISIBLE_DEVICES`` when it is set (up to the first negative one, as CUDA reads it),
    else the GPUs the driver lists in ``/proc/driver/nvidia/gpus``; None when neither says."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        count = 0
        for entry in visible.split(","):
            if not entry.strip() or entry.strip().startswith("-"):
                break
            count += 1
        return count
    if _NVIDIA_GPUS.is_dir():
        return sum(1 for _ in _NVIDIA_GPUS.iterdir())
    return None


def detect_hardware() -> Hardware:
    """This machine's physical cores, hyperthread numbering, sockets and GPUs (psutil, sysfs)."""
    n_logical = psutil.cpu_count(logical=True) or 1
    n_core = psutil.cpu_count(logical=False) or n_logical
    return Hardware(
        n_cpu_core=n_core,
        hyperthread_offset=_detect_hyperthread_offset(n_core, n_logical),
        n_socket=_detect_n_socket(n_core),
        n_gpu=visible_gpu_count(),
    )


def _allowed_cpus() -> set[int]:
    if hasattr(os, "sched_getaffinity"):
        return set(os.sched_getaffinity(0))
    return set(range(psutil.cpu_count(logical=True) or 1))


# ----------------------------------------------------------------------------- the dicts
def _sampling_affinity(s: AffinitySpec, p: SlotProcess) -> AffinityDict:
    """What a runner and its sampler read (keys of rl_runners' and rl_samplers' code)."""
    free = p.cores[p.n_reserved :]
    n_workers = len(free) // s.cpu_per_worker
    workers = [
        logical_cpus(s, free[w * s.cpu_per_worker : (w + 1) * s.cpu_per_worker])
        for w in range(n_workers)
    ]
    if s.alternating:  # two groups of workers take turns on the same cores
        workers = workers + [list(cpus) for cpus in workers]
    return AffinityDict(
        master_cpus=logical_cpus(s, p.cores) if s.set_affinity else None,
        master_torch_threads=len(p.cores),
        workers_cpus=workers if s.set_affinity else [None] * len(workers),
        worker_torch_threads=s.cpu_per_worker,
        cuda_idx=p.cuda_idx,
        alternating=s.alternating,
        set_affinity=s.set_affinity,
    )


def _optimizer_affinity(s: AffinitySpec, p: SlotProcess) -> AffinityDict:
    return AffinityDict(
        master_cpus=logical_cpus(s, p.cores) if s.set_affinity else None,
        master_torch_threads=len(p.cores),
        cuda_idx=p.cuda_idx,
        set_affinity=s.set_affinity,
    )


def _slot_affinity(s: AffinitySpec, slot: RunSlot) -> AffinityDict | list[AffinityDict]:
    if slot.sampler is not None:
        return AffinityDict(
            sampler=_sampling_affinity(s, slot.sampler),
            optimizer=[_optimizer_affinity(s, p) for p in slot.processes],
        )
    dicts = [_sampling_affinity(s, p) for p in slot.processes]
    return dicts[0] if len(dicts) == 1 else dicts


def slot_resources(code: str, run_slot: int) -> tuple[list[int], list[int]]:
    """The logical cpus and the GPUs of one run slot (what the launcher pins and checks)."""
    spec, _ = decode_code(code)
    slots = slot_layout(spec)
    slot = slots[_check_run_slot(run_slot, len(slots))]
    processes = [*slot.processes, *([slot.sampler] if slot.sampler else [])]
    cpus = sorted({cpu for p in processes for cpu in logical_cpus(spec, p.cores)})
    gpus = sorted({p.cuda_idx for p in processes if p.cuda_idx is not None})
    return cpus, gpus


def _check_run_slot(run_slot: Any, n_slots: int) -> int:
    run_slot = check_int("run_slot", run_slot, 0)
    if run_slot >= n_slots:
        raise ValueError(f"run_slot={run_slot} is out of range: there are {n_slots} run slots")
    return run_slot


def check_slot_on_machine(code: str, run_slot: int) -> None:
    """Refuse a slot whose cpus this process may not use, or whose GPUs are not visible."""
    spec, _ = decode_code(code)
    cpus, gpus = slot_resources(code, run_slot)
    if spec.set_affinity:
        allowed = _allowed_cpus()
        missing = sorted(set(cpus) - allowed)
        if missing:
            raise ValueError(
                f"run slot {run_slot} of affinity code {code!r} uses cpus {missing} that this "
                f"process may not use (allowed: {sorted(allowed)}); encode the affinity for this "
                "machine, or with set_affinity=False"
            )
    visible = visible_gpu_count()
    if gpus and visible is not None and max(gpus) >= visible:
        raise ValueError(
            f"run slot {run_slot} of affinity code {code!r} uses GPU {max(gpus)}, but only "
            f"{visible} GPU(s) are visible (CUDA_VISIBLE_DEVICES or the NVIDIA driver)"
        )


# ----------------------------------------------------------------------------- public API
def encode_affinity(
    n_cpu_core: int | None = None,
    n_gpu: int = 0,
    contexts_per_gpu: int = 1,
    gpu_per_run: int = 1,
    cpu_per_run: int | None = None,
    cpu_per_worker: int = 1,
    cpu_reserved: int = 0,
    hyperthread_offset: int | None = None,
    n_socket: int | None = None,
    run_slot: int | None = None,
    async_sample: bool = False,
    sample_gpu_per_run: int = 0,
    optim_sample_share_gpu: bool = False,
    alternating: bool = False,
    set_affinity: bool = True,
) -> str:
    """The affinity code for a machine's resources and each run's share of them.

    ``n_cpu_core`` (physical cores), ``hyperthread_offset`` and ``n_socket`` default to this
    machine's (``detect_hardware``).  Without GPUs each run gets ``cpu_per_run`` cores (all of
    them by default; rlpyt's default was 1); with GPUs each run gets ``gpu_per_run`` GPUs (or a
    1/``contexts_per_gpu`` share of one), the cores are split evenly over the runs and
    ``cpu_per_run`` is ignored, as rlpyt did.  With ``async_sample`` and
    ``optim_sample_share_gpu`` the sampler serves on the optimizer's first GPU and
    ``sample_gpu_per_run`` is ignored (rlpyt: it overrides).  Each sampling process keeps
    its first ``cpu_reserved`` cores out of its workers (async: the optimizer gets
    ``max(cpu_reserved, 1)`` cores per GPU), and has one worker per ``cpu_per_worker`` cores,
    twice that with ``alternating``.  ``run_slot`` names one run's share (the launcher adds it);
    leave it None for ``run_experiments``.  Impossible requests raise ValueError.
    """
    if n_cpu_core is not None:
        n_cpu_core = check_int("n_cpu_core", n_cpu_core, 1)  # (8.0 too, before it is used)
    if n_cpu_core is None or hyperthread_offset is None or n_socket is None:
        machine = detect_hardware()
        if n_cpu_core is None:
            n_cpu_core = machine.n_cpu_core
        if hyperthread_offset is None:
            usable = isinstance(n_cpu_core, int) and machine.hyperthread_offset >= n_cpu_core
            hyperthread_offset = machine.hyperthread_offset if usable else 0
        if n_socket is None:  # the sockets that n_cpu_core cores fill, counted on this machine
            per_socket = machine.n_cpu_core // machine.n_socket
            whole = isinstance(n_cpu_core, int) and n_cpu_core % per_socket == 0
            n_socket = max(n_cpu_core // per_socket, 1) if whole else 1
    n_gpu = check_int("n_gpu", n_gpu, 0)
    if n_gpu:  # rlpyt's meaning (its default was 1): the GPUs decide the runs and their cores
        if cpu_per_run is not None:
            check_int("cpu_per_run", cpu_per_run, 0)
        cpu_per_run = 0
    elif cpu_per_run is None:
        cpu_per_run = n_cpu_core
    elif cpu_per_run == 0:
        raise ValueError("cpu_per_run must be an int >= 1 or None without GPUs, got 0")
    if async_sample is True and optim_sample_share_gpu is True and n_gpu:
        check_int("sample_gpu_per_run", sample_gpu_per_run, 0)
        sample_gpu_per_run = 1  # rlpyt: sharing overrides it (the optimizer's GPU serves)
    spec = AffinitySpec(
        n_cpu_core=n_cpu_core,
        n_gpu=n_gpu,
        contexts_per_gpu=contexts_per_gpu,
        gpu_per_run=gpu_per_run,
        cpu_per_run=cpu_per_run,
        cpu_per_worker=cpu_per_worker,
        cpu_reserved=cpu_reserved,
        hyperthread_offset=hyperthread_offset,
        n_socket=n_socket,
        async_sample=async_sample,
        sample_gpu_per_run=sample_gpu_per_run,
        optim_sample_share_gpu=optim_sample_share_gpu,
        alternating=alternating,
        set_affinity=set_affinity,
    )
    spec = with_int_counts(spec)
    slots = slot_layout(spec)
    if run_slot is not None:
        run_slot = _check_run_slot(run_slot, len(slots))
    return encode_code(spec, run_slot)


def n_run_slots(affinity_code: str) -> int:
    """How many runs the code's machine holds at once (the launcher's concurrency)."""
    spec, _ = decode_code(affinity_code)
    return len(slot_layout(spec))


def affinity_from_code(
    run_slot_affinity_code: str, check_machine: bool = True
) -> AffinityDict | list[AffinityDict]:
    """The affinity of the run slot the code names (a launched script's first argument).

    One dict for a single-process run (``master_cpus``, ``master_torch_threads``,
    ``workers_cpus``, ``worker_torch_threads``, ``cuda_idx``, ``alternating``,
    ``set_affinity``); a list of such dicts, one per process and GPU, when ``gpu_per_run > 1``;
    with ``async_sample`` a dict of ``sampler`` (such a dict) and ``optimizer`` (a list, one
    per optimizer GPU, of ``master_cpus``, ``master_torch_threads``, ``cuda_idx``,
    ``set_affinity``).  With ``set_affinity=False`` every cpu list is None (nothing gets
    pinned; the worker count stays).  ``check_machine`` refuses cpus this process may not use
    and GPU indices beyond those visible (when that can be told without torch).
    """
    spec, run_slot = decode_code(run_slot_affinity_code)
    if run_slot is None:
        raise ValueError(
            f"affinity code {run_slot_affinity_code!r} names no run slot: use the code a "
            "launched script gets as its first argument, or make_affinity(run_slot=...)"
        )
    slots = slot_layout(spec)
    _check_run_slot(run_slot, len(slots))
    if check_machine:
        check_slot_on_machine(run_slot_affinity_code, run_slot)
    return _slot_affinity(spec, slots[run_slot])


def make_affinity(
    run_slot: int = 0, check_machine: bool = True, **kwargs: Any
) -> AffinityDict | list[AffinityDict]:
    """``affinity_from_code(encode_affinity(run_slot=run_slot, **kwargs))``: the affinity for
    a script run by hand (same arguments as ``encode_affinity``)."""
    return affinity_from_code(encode_affinity(run_slot=run_slot, **kwargs), check_machine)
