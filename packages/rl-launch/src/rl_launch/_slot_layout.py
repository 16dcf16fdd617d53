"""The layout of run slots: which of the machine's cores (numbered as ``_affinity``'s
docstring says) and which GPU each process of a run gets, and their logical cpu ids."""

from __future__ import annotations

from typing import NamedTuple

from ._affinity_code import AffinitySpec, check_spec

__all__ = ["RunSlot", "SlotProcess", "logical_cpus", "slot_layout"]


class SlotProcess(NamedTuple):
    """One process of a run: its physical cores, its GPU, and how many of its first cores
    are kept out of the sampler's workers."""

    cores: tuple[int, ...]
    cuda_idx: int | None
    n_reserved: int


class RunSlot(NamedTuple):
    """One run: its processes (the optimizer's, when async), and the async sampler."""

    processes: list[SlotProcess]
    sampler: SlotProcess | None


def _socket_blocks(s: AffinitySpec) -> list[tuple[int, ...]]:
    """Runs of ``cpu_per_run`` cores that stay within a socket (or take whole sockets)."""
    per_socket = s.n_cpu_core // s.n_socket
    size = s.cpu_per_run
    if size <= per_socket:
        starts = [
            socket * per_socket + i * size
            for socket in range(s.n_socket)
            for i in range(per_socket // size)
        ]
    elif size % per_socket == 0:
        starts = list(range(0, s.n_cpu_core - size + 1, size))
    else:
        raise ValueError(
            f"cpu_per_run={size} would straddle sockets of {per_socket} cores "
            f"(n_cpu_core={s.n_cpu_core} / n_socket={s.n_socket}): use a divisor or a "
            f"multiple of {per_socket}"
        )
    return [tuple(range(start, start + size)) for start in starts]


def _even_blocks(n_cpu_core: int, n_slots: int) -> list[tuple[int, ...]]:
    size = n_cpu_core // n_slots
    if size == 0:
        raise ValueError(f"n_cpu_core={n_cpu_core} cores cannot give each of {n_slots} runs one")
    return [tuple(range(i * size, (i + 1) * size)) for i in range(n_slots)]


def slot_layout(s: AffinitySpec) -> list[RunSlot]:
    """Every run slot's processes; a ValueError when a process would lack cores."""
    check_spec(s)
    n_optim_cores = max(s.cpu_reserved, 1)  # async: the optimizer's cores, per optimizer GPU
    slots: list[RunSlot] = []
    if s.n_gpu == 0:
        for block in _socket_blocks(s):
            if s.async_sample:
                optimizer = SlotProcess(block[:n_optim_cores], None, 0)
                slots.append(RunSlot([optimizer], SlotProcess(block[n_optim_cores:], None, 0)))
            else:
                slots.append(RunSlot([SlotProcess(block, None, s.cpu_reserved)], None))
    elif s.async_sample:
        sampler_gpus = 0 if s.optim_sample_share_gpu else s.sample_gpu_per_run
        gpus_per_run = s.gpu_per_run + sampler_gpus
        for i, block in enumerate(_even_blocks(s.n_cpu_core, s.n_gpu // gpus_per_run)):
            first_gpu = i * gpus_per_run
            optimizers = [
                SlotProcess(block[k * n_optim_cores : (k + 1) * n_optim_cores], first_gpu + k, 0)
                for k in range(s.gpu_per_run)
            ]
            if s.optim_sample_share_gpu:
                sampler_gpu: int | None = first_gpu
            else:
                sampler_gpu = first_gpu + s.gpu_per_run if sampler_gpus else None
            sampler = SlotProcess(block[s.gpu_per_run * n_optim_cores :], sampler_gpu, 0)
            slots.append(RunSlot(optimizers, sampler))
    else:
        n_slots = s.n_gpu * s.contexts_per_gpu // s.gpu_per_run
        blocks = _even_blocks(s.n_cpu_core, n_slots)
        for run in range(n_slots):
            i = run  # rlpyt's order with contexts: every GPU's first run, then the second ...
            if s.contexts_per_gpu > 1:  # (so fewer runs than slots still spread over the GPUs)
                i = (run % s.n_gpu) * s.contexts_per_gpu + run // s.n_gpu
            block = blocks[i]
            size = len(block) // s.gpu_per_run
            processes = [
                SlotProcess(
                    block[k * size : (k + 1) * size],
                    (i * s.gpu_per_run + k) // s.contexts_per_gpu,
                    s.cpu_reserved,
                )
                for k in range(s.gpu_per_run)
            ]
            slots.append(RunSlot(processes, None))
    for slot in slots:
        _check_slot(s, slot, n_optim_cores)
    return slots


def _check_slot(s: AffinitySpec, slot: RunSlot, n_optim_cores: int) -> None:
    if slot.sampler is not None:  # async: the optimizer's cores come first
        got = min(len(p.cores) for p in slot.processes)
        if got < n_optim_cores or len(slot.sampler.cores) < s.cpu_per_worker:
            raise ValueError(
                f"a run's cores do not cover its {s.gpu_per_run} optimizer process(es) of "
                f"max(cpu_reserved, 1)={n_optim_cores} core(s) each and a sampler of at least "
                f"cpu_per_worker={s.cpu_per_worker} core(s) (the sampler is left "
                f"{len(slot.sampler.cores)})"
            )
        return
    for p in slot.processes:
        free = len(p.cores) - p.n_reserved
        if free < s.cpu_per_worker:
            raise ValueError(
                f"a run process gets {len(p.cores)} core(s); after cpu_reserved="
                f"{p.n_reserved} that leaves {max(free, 0)}, fewer than cpu_per_worker="
                f"{s.cpu_per_worker} for even one sampler worker"
            )


def logical_cpus(s: AffinitySpec, cores: tuple[int, ...]) -> list[int]:
    """The logical cpu ids of ``cores`` (the used ones, numbered 0 .. n_cpu_core - 1): each
    core's id on the machine (which skips the unused cores at each socket's end), and its
    hyperthread's if used."""
    per_socket = s.n_cpu_core // s.n_socket
    stride = max(s.n_cpu_core, s.hyperthread_offset) // s.n_socket  # the machine's, per socket
    ids = [c // per_socket * stride + c % per_socket for c in cores]
    extra = [c + s.hyperthread_offset for c in ids] if s.hyperthread_offset else []
    return sorted([*ids, *extra])
