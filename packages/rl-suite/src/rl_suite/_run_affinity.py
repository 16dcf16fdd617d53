"""Where a run's processes and threads go: the affinity a configuration implies (cpus, torch
threads, workers, GPU), how many training processes it has (``runner.processes`` or
torchrun's), whether it samples asynchronously, and each process's share."""

from __future__ import annotations

import os
import re
from typing import Any

import torch

from rl_arrays import as_count

from ._choices import ALGO_CLASSES, QPG_AGENTS

__all__ = [
    "async_affinity",
    "check_processes",
    "config_affinity",
    "is_asynchronous",
    "process_affinities",
    "process_count",
    "torchrun_rank",
]


def config_affinity(config: dict[str, Any]) -> dict[str, Any]:
    """What the runner and sampler read: the CUDA device, torch's threads and the workers."""
    device = str(config["device"])
    match = re.fullmatch(r"cuda(?::(\d+))?", device)
    if device != "cpu" and match is None:
        raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}")
    affinity: dict[str, Any] = {}
    threads = config["torch_threads"]
    if threads is not None:
        expected = "a positive int or None"
        affinity["master_torch_threads"] = as_count("torch_threads", threads, 1, expected=expected)
    if match is not None:
        index = int(match.group(1) or 0)
        if index >= torch.cuda.device_count():
            raise ValueError(
                f"device {device!r} asked for, but torch sees {torch.cuda.device_count()} GPU(s)"
            )
        affinity["cuda_idx"] = index
    workers = config["sampler"]["workers"]
    if workers is not None:
        if config["sampler"]["kind"] == "serial":
            raise ValueError("sampler.workers applies to the cpu and gpu samplers, not serial")
        B = config["sampler"]["batch_B"]
        expected = f"an int from 1 to batch_B={B}"
        n_workers = as_count("sampler.workers", workers, 1, expected=expected)  # 4.0 too
        if n_workers > B:
            raise ValueError(f"sampler.workers must be {expected}, got {workers!r}")
        affinity["workers_cpus"] = [None] * n_workers  # one worker each, not pinned
    return affinity


def torchrun_rank() -> int | None:
    """This process's rank in a job started by torchrun (None outside one)."""
    names = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    return int(os.environ["RANK"]) if all(name in os.environ for name in names) else None


def process_count(config: dict[str, Any]) -> int:
    processes = config["runner"].get("processes", 1)
    return as_count("runner.processes", processes, 1, expected="a positive int")  # 2.0 too


def check_processes(config: dict[str, Any], processes: int) -> None:
    if (processes > 1 or torchrun_rank() is not None) and config["algo"] in QPG_AGENTS:
        raise ValueError(
            f"runner.processes > 1 does not work for {config['algo']} (its Q networks are not "
            "all-reduced); train it in one process, or with runner.asynchronous=True"
        )


def is_asynchronous(config: dict[str, Any], processes: int) -> bool:
    asynchronous = config["runner"].get("asynchronous", False)
    if not isinstance(asynchronous, bool):
        raise ValueError(f"runner.asynchronous must be True or False, got {asynchronous!r}")
    if asynchronous and not hasattr(ALGO_CLASSES[config["algo"]], "async_initialize"):
        replay = ", ".join(a for a, cls in ALGO_CLASSES.items() if hasattr(cls, "async_initialize"))
        raise ValueError(
            f"runner.asynchronous needs a replay algorithm ({replay}); {config['algo']} learns "
            "from each batch as it comes"
        )
    if asynchronous and (processes > 1 or torchrun_rank() is not None):
        raise ValueError("runner.asynchronous runs one optimizer: not with runner.processes > 1")
    return asynchronous


def async_affinity(affinity: dict[str, Any]) -> dict[str, Any]:
    """The asynchronous runner's split: the sampler's process (its cpus, its workers, one
    torch thread to act) and the optimizer's (the cpus, threads and GPU asked for)."""
    shared = {k: v for k, v in affinity.items() if k in ("master_cpus", "set_affinity")}
    workers = {k: v for k, v in affinity.items() if k.startswith("worker")}
    optimizer = {k: v for k, v in affinity.items() if k in ("master_torch_threads", "cuda_idx")}
    sampler = {**shared, **workers, "master_torch_threads": 1}
    return {"sampler": sampler, "optimizer": [{**shared, **optimizer}]}


def process_affinities(affinity: dict[str, Any], processes: int) -> list[dict[str, Any]]:
    """One affinity per process of a synchronous run: the same cpus and threads, and on GPUs
    consecutive devices from the one asked for."""
    cuda_idx = affinity.get("cuda_idx")
    if cuda_idx is not None and cuda_idx + processes > torch.cuda.device_count():
        raise ValueError(
            f"runner.processes={processes} on GPUs from cuda:{cuda_idx} needs "
            f"{cuda_idx + processes} GPUs; torch sees {torch.cuda.device_count()}"
        )
    return [
        {**affinity, **({} if cuda_idx is None else {"cuda_idx": cuda_idx + rank})}
        for rank in range(processes)
    ]
