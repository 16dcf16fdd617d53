"""The replay buffer on the training device (``replay_device``) against the host buffer (numpy,
each batch converted and copied to the device), for vector observations.

    python benchmarks/replay_device.py                 # this machine's CPU: replay_device="cpu"
    python benchmarks/replay_device.py --device cuda   # a GPU (not yet run on one)
    python benchmarks/replay_device.py --quick         # seconds; the numbers mean nothing

(a) The replay alone, at Pendulum-v1's sizes (observations float32 [3], actions [1], time
    limits, 100k steps of one environment, batches of 256) and CartPole-v1's (float32 [4],
    8 environments, 3-step returns, prioritized, batches of 64): microseconds per batch
    (the best of several rounds, host and device rounds alternating), until the batch is
    tensors on the device:
    - uniform, one batch (``sample_batch``);
    - uniform, 50 batches drawn together (``sample_batches``, as ``ReplayAlgo`` draws them);
    - prioritized, one batch and its new priorities (computed on the device, as DQN's, by
      two operations counted with the buffer's);
    - the same with the sum tree on the device too (``tree_on_device``): nothing copied
      either way, a ``cumsum`` over every priority and about thirty more operations instead;
    - the host sum tree alone (sample 64, update 64): the part of a prioritized batch that
      stays on the host either way.
    Beside the times, counted rather than timed: the torch operations that compute (not
    views) one batch takes on the device side (kernel launches on a GPU, whatever the batch
    size; with ``--device cuda`` the index copy among them) and the host-to-device
    copies per batch on each side (the host side copies every field of the batch; the device
    side its row indices, and the importance weights when prioritized).
(b) Training, ``optimize_agent`` as the runner calls it (append the sampler's steps, replay,
    update): SAC with the ``pendulum-sac`` preset and DQN with ``cartpole-dqn`` made
    prioritized (and again with its tree on the device: ``pri_tree_on_device``), each side
    in its own fresh process (spawn) with 1 torch thread, random-action fill, then the best
    of several timed rounds; ms per update (``--quick``: in this process).

The ratio is the host buffer's time over the device buffer's: above 1, replay on the device is
faster. On a CPU the "device" is the host itself, so (a) and (b) only show what the device
path costs in operations where no copy can be saved; the copies it saves happen on a GPU.
By default the sum tree stays on the host (indices and importance weights copied to the
device, new priorities copied back); which tree is faster on a GPU cannot be measured on a
CPU (``gpu.py``'s ``replay`` row measures it there).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import multiprocessing
import os
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from rl_arrays import buffer_to, torchify_buffer
from rl_replay import ReplayBuffer, SamplesToBuffer, SamplesToBufferTl, SumTree

SIZES = dict(steps=100_000, rounds=7, min_time=0.3, fill=1_000, warm_up=20, per_round=200)
QUICK = dict(steps=2_000, rounds=1, min_time=0.0, fill=300, warm_up=2, per_round=4)


class KernelCount(TorchDispatchMode):
    """Counts the torch operations run inside its block that compute (not views): a GPU
    launches a kernel for each."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.count += not func.is_view
        return func(*args, **(kwargs or {}))


def pendulum_buffer(steps: int, device: str | None) -> ReplayBuffer:
    """SAC's buffer on Pendulum-v1: one environment, episodes cut by the time limit at 200."""
    rng = np.random.default_rng(0)
    timeout = (np.arange(steps) % 200 == 199)[:, None]
    example = SamplesToBufferTl(
        np.zeros(3, np.float32), np.zeros(1, np.float32), np.float32(0), False, False
    )
    buffer = ReplayBuffer(example, steps, 1, 0.99, time_limit=True, seed=0, device=device)
    buffer.append_samples(
        SamplesToBufferTl(
            rng.normal(size=(steps, 1, 3)).astype(np.float32),
            rng.uniform(-2, 2, (steps, 1, 1)).astype(np.float32),
            rng.normal(size=(steps, 1)).astype(np.float32),
            timeout,
            timeout,
        )
    )
    return buffer


def cartpole_buffer(steps: int, device: str | None, tree_on_device: bool = False) -> ReplayBuffer:
    """Prioritized DQN's buffer on CartPole-v1: 8 environments, 3-step returns; its sum
    tree on the device with ``tree_on_device``."""
    rng, B = np.random.default_rng(0), 8
    example = SamplesToBuffer(np.zeros(4, np.float32), np.int64(0), np.float32(0), False)
    on_device = {"tree_on_device": True} if tree_on_device else {}
    buffer = ReplayBuffer(
        example, steps, B, 0.99, 3, prioritized=True, seed=0, device=device, **on_device
    )
    T = steps // B
    buffer.append_samples(
        SamplesToBuffer(
            rng.normal(size=(T, B, 4)).astype(np.float32),
            rng.integers(0, 2, (T, B)),
            np.ones((T, B), np.float32),
            rng.random((T, B)) < 0.02,
        )
    )
    return buffer


Case = tuple[Callable[[int, str | None], ReplayBuffer], Callable[[ReplayBuffer], Any]]


def replay_cases(device: str) -> dict[str, Case]:
    """What one batch costs, until its tensors are on ``device`` (priorities back in the
    tree), and the buffer (host or ``device``) each is timed on."""

    def on_device(buffer: ReplayBuffer, batch: Any) -> Any:
        if buffer.device is None:
            batch = buffer_to(torchify_buffer(batch), device)
        if device != "cpu":
            torch.cuda.synchronize()  # (timed until the batch is there)
        return batch

    def prioritized(buffer: ReplayBuffer) -> Any:
        batch = on_device(buffer, buffer.sample_batch(64))
        priorities = batch.return_.abs().clamp(min=1e-6)
        if buffer.priorities.tree_device is None:
            priorities = priorities.cpu().numpy()
        buffer.update_batch_priorities(priorities)
        if device != "cpu":
            torch.cuda.synchronize()  # (timed until the tree is written)
        return batch

    def tree_moves(steps: int, device: str | None) -> ReplayBuffer:
        return cartpole_buffer(steps, device, tree_on_device=device is not None)

    return {
        "uniform, 1 batch of 256 (Pendulum)": (
            pendulum_buffer,
            lambda b: on_device(b, b.sample_batch(256)),
        ),
        "uniform, 50 batches of 256 at once": (
            pendulum_buffer,
            lambda b: on_device(b, b.sample_batches(256, 50)),
        ),
        "prioritized, 1 batch of 64 (CartPole)": (cartpole_buffer, prioritized),
        "prioritized, the tree on the device too": (tree_moves, prioritized),
    }


def best_time(call: Callable[[], Any], min_time: float) -> float:
    """Seconds per call over at least ``min_time`` seconds of calls."""
    calls, start = 0, time.perf_counter()
    while True:
        call()
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_time:
            return elapsed / calls


def replay_table(device: str, sizes: dict[str, Any]) -> None:
    """(a): the replay alone, host and device rounds alternating; the best round each."""
    torch.set_num_threads(1)
    print(f"\n(a) replay alone, 1 torch thread; device side: replay_device={device!r}")
    header = ("case", "host us", "device us", "speed ratio", "kernels", "copies host/device")
    print(f"{header[0]:<40}{header[1]:>10}{header[2]:>11}{header[3]:>13}{header[4]:>11}", end="")
    print(f"{header[5]:>20}")
    for name, (make, case) in replay_cases(device).items():
        host, on_device = make(sizes["steps"], None), make(sizes["steps"], device)
        best = {"host": float("inf"), "device": float("inf")}
        for _ in range(sizes["rounds"]):
            for side, buffer in (("host", host), ("device", on_device)):
                seconds = best_time(functools.partial(case, buffer), sizes["min_time"])
                best[side] = min(best[side], seconds / (50 if "50" in name else 1))
        with KernelCount() as ops:
            batch = case(on_device)
        batches = 50 if "50" in name else 1
        leaves = len(_leaves(batch))
        device_copies = 0 if "tree" in name else 2 if "prioritized" in name else 1
        copies = f"{leaves}/{device_copies}"
        print(
            f"{name:<40}{best['host'] * 1e6:>10.1f}{best['device'] * 1e6:>11.1f}"
            f"{best['host'] / best['device']:>13.2f}{ops.count / batches:>11.1f}{copies:>20}",
            flush=True,
        )
    tree = SumTree(sizes["steps"] // 8, 8, 3, 1, rng=0)
    tree.advance(sizes["steps"] // 8 - 4)
    priorities = np.random.default_rng(0).random(64)

    def tree_step() -> None:
        tree.sample(64)
        tree.update_batch_priorities(priorities)

    seconds = min(best_time(tree_step, sizes["min_time"]) for _ in range(sizes["rounds"]))
    print(f"{'host sum tree alone (sample + update 64)':<40}{seconds * 1e6:>10.1f}", flush=True)


def _leaves(batch: Any) -> list[Any]:
    if isinstance(batch, tuple):
        return [leaf for item in batch for leaf in _leaves(item)]
    return [] if batch is None else [batch]


def train(task: str, replay_device: str | None, device: str, sizes: dict[str, Any]) -> float:
    """(b), in a fresh process: seconds per update in the best round of ``optimize_agent``."""
    torch.set_num_threads(1)
    import rl_suite
    from rl_runners import logger_context

    preset = "pendulum-sac" if task == "sac" else "cartpole-dqn"
    overrides = [
        f"algo_kwargs.min_steps_learn={sizes['fill']}",
        "runner.evaluate=False",
        "torch_threads=1",
        f"device='{device}'",
        f"algo_kwargs.replay_device={replay_device!r}",
    ]
    if task.startswith("dqn"):
        overrides.append("algo_kwargs.prioritized_replay=True")
    if task == "dqn-tree" and replay_device is not None:
        overrides.append("algo_kwargs.pri_tree_on_device=True")
    config = rl_suite.apply_overrides(rl_suite.make_config(preset, seed=0), overrides)
    runner = rl_suite.build(config)
    with (
        tempfile.TemporaryDirectory() as log_dir,
        open(os.devnull, "w") as devnull,
        contextlib.redirect_stdout(devnull),
        logger_context(log_dir, 0, "replay_device", log_params={}, snapshot_mode="none"),
    ):
        runner.startup()
        try:
            algo, itr = runner.algo, 0

            def iteration() -> float:
                nonlocal itr
                runner.agent.sample_mode(itr)
                samples, _ = runner.sampler.obtain_samples(itr)
                runner.agent.train_mode(itr)
                start = time.perf_counter()
                algo.optimize_agent(itr, samples)
                if device == "cuda":
                    torch.cuda.synchronize()
                itr += 1
                return time.perf_counter() - start

            while itr < algo.min_itr_learn:
                iteration()
            per_itr = algo.updates_per_optimize
            for _ in range(max(1, sizes["warm_up"] // per_itr)):
                iteration()
            itrs = max(1, sizes["per_round"] // per_itr)
            rounds = [
                sum(iteration() for _ in range(itrs)) / (itrs * per_itr)
                for _ in range(sizes["rounds"])
            ]
        finally:
            runner.shutdown()
    return min(rounds)


def training_table(device: str, sizes: dict[str, Any]) -> None:
    """(b): each side twice, alternating, each time in a fresh process; the best of each."""
    print(f"\n(b) training (optimize_agent), 1 torch thread, agent on {device!r}")
    print(f"{'task':<40}{'host ms':>10}{'device ms':>11}{'speed ratio':>13}")
    context = multiprocessing.get_context("spawn")
    tasks = {
        "sac": "SAC, pendulum-sac",
        "dqn": "prioritized DQN, cartpole-dqn",
        "dqn-tree": "the same, the tree on the device too",
    }
    for task, name in tasks.items():
        best = {None: float("inf"), device: float("inf")}
        for _ in range(1 if sizes is QUICK else 2):
            for replay_device in best:
                if sizes is QUICK:  # (no fresh interpreters: seconds, not timings)
                    seconds = train(task, replay_device, device, sizes)
                else:
                    with ProcessPoolExecutor(1, mp_context=context) as pool:
                        seconds = pool.submit(train, task, replay_device, device, sizes).result()
                best[replay_device] = min(best[replay_device], seconds)
        host, on_device = best[None], best[device]
        print(f"{name:<40}{host * 1e3:>10.3f}{on_device * 1e3:>11.3f}{host / on_device:>13.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="seconds; no timing claims")
    parser.add_argument("--device", default="cpu", help="the training device (cpu, cuda)")
    args = parser.parse_args()
    if args.device != "cpu" and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: no CUDA GPU here")
    sizes = QUICK if args.quick else SIZES
    if args.quick:
        print("--quick: tiny sizes; these numbers mean nothing.")
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"load average before: {load} (1, 5, 15 min) on {os.cpu_count()} cores")
    replay_table(args.device, sizes)
    training_table(args.device, sizes)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"\nload average after: {load}")


if __name__ == "__main__":
    main()
