"""Torch threads: a runner built in Python against the same run from the command line, and the
update times behind the runners' default thread count.

    python benchmarks/threads.py            # ~3 min on 2 cores
    python benchmarks/threads.py --quick    # a few seconds; checks it still works

Part 1, the same run three ways (PPO on CartPole-v1, the ``cartpole`` preset, 50k steps,
evaluations off), each in a fresh process, one after another:

- ``cli``: ``rl_suite.train`` as ``rl-suite train`` runs it (the preset says one thread);
- ``python``: the same runner with no thread setting in its affinity, as a user who builds
  ``MinibatchRl`` by hand gets it: the runner's default (``default_torch_threads``);
- ``python, every core``: the same with ``master_torch_threads`` = every core, torch's own
  default, what such a runner got before the default existed.

The ratios are each one's wall time over the CLI's.

Part 2, why the default is one thread below ``SMALL_MODEL_PARAMETERS``: forward, backward
and an Adam step of MLPs and of the Nature CNN at minibatch sizes of our presets, on one
thread and on every core, in this process. Where a second thread does not pay (small models:
the hand-over costs more than the share of work it takes), one is the default; a model of a
million parameters or more gets the cores the sampler's workers leave.

A machine shared with other work (see the load average printed) favours one thread more
than an idle one does.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import tempfile
import time

import torch

STEPS = 50_000


def _train(way: str, steps: int, log_dir: str, results: multiprocessing.Queue) -> None:
    import rl_suite

    config = rl_suite.make_config("cartpole", steps=steps, seed=0)
    config = rl_suite.apply_overrides(
        config, ["runner.evaluate=False", f"runner.log_interval_steps={steps // 5}"]
    )
    started = time.perf_counter()
    if way == "cli":
        rl_suite.train(config, log_dir)
    else:
        runner = rl_suite.build(config)
        runner.affinity = {} if way == "python" else {"master_torch_threads": os.cpu_count()}
        with rl_suite.logger_context(log_dir, 0, "threads", override_prefix=True):
            runner.train()
    results.put((way, time.perf_counter() - started, torch.get_num_threads()))


def runs(steps: int) -> None:
    ctx = multiprocessing.get_context("spawn")
    results: multiprocessing.Queue = ctx.Queue()
    times = {}
    print(f"PPO on CartPole-v1, {steps:,} steps, each in a fresh process:")
    for way in ("cli", "python", "python, every core"):
        with tempfile.TemporaryDirectory() as log_dir:
            process = ctx.Process(target=_train, args=(way, steps, log_dir, results))
            process.start()
            process.join()
            if process.exitcode != 0:
                raise SystemExit(f"the {way!r} run failed (exit {process.exitcode})")
        _, seconds, _ = results.get()
        times[way] = seconds
        ratio = seconds / times["cli"]
        print(f"  {way:<20} {seconds:7.1f} s   {ratio:5.2f} x the CLI's time")


def _update_ms(model: torch.nn.Module, x: torch.Tensor, repeats: int) -> float:
    optimizer = torch.optim.Adam(model.parameters())
    for i in range(repeats + 3):  # (3 to warm up)
        if i == 3:
            started = time.perf_counter()
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()
    return (time.perf_counter() - started) / repeats * 1e3


def updates(quick: bool) -> None:
    def mlp(inputs: int, hidden: int) -> torch.nn.Module:
        return torch.nn.Sequential(
            torch.nn.Linear(inputs, hidden), torch.nn.Tanh(),
            torch.nn.Linear(hidden, hidden), torch.nn.Tanh(),
            torch.nn.Linear(hidden, 2),
        )  # fmt: skip

    cnn = torch.nn.Sequential(  # the Nature CNN (Atari), 1.7M parameters
        torch.nn.Conv2d(4, 32, 8, 4), torch.nn.ReLU(),
        torch.nn.Conv2d(32, 64, 4, 2), torch.nn.ReLU(),
        torch.nn.Conv2d(64, 64, 3, 1), torch.nn.ReLU(),
        torch.nn.Flatten(), torch.nn.Linear(3136, 512), torch.nn.ReLU(), torch.nn.Linear(512, 6),
    )  # fmt: skip
    cases = [
        ("MLP [64, 64], batch 256 (CartPole PPO)", mlp(4, 64), (256, 4)),
        ("MLP [256, 256], batch 32 (MuJoCo PPO)", mlp(17, 256), (32, 17)),
        ("MLP [256, 256], batch 256 (SAC)", mlp(17, 256), (256, 17)),
        ("Nature CNN, batch 32 (DQN)", cnn, (32, 4, 84, 84)),
        ("Nature CNN, batch 256 (Atari PPO)", cnn, (256, 4, 84, 84)),
    ]
    cores = os.cpu_count() or 1
    print(f"\nOne update (forward, backward, Adam), 1 thread against {cores}:")
    for name, model, shape in cases:
        parameters = sum(p.numel() for p in model.parameters())
        x = torch.randn(shape)
        repeats = 2 if quick else (5 if len(shape) == 4 else 50)
        ms = {}
        for threads in (1, cores):
            torch.set_num_threads(threads)
            ms[threads] = _update_ms(model, x, repeats)
        print(
            f"  {name:<40} {parameters:>10,} params  {ms[1]:8.2f} ms  {ms[cores]:8.2f} ms  "
            f"{ms[1] / ms[cores]:5.2f} x faster on {cores}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny runs: checks it works")
    args = parser.parse_args()
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()}, torch {torch.__version__}")
    runs(2_048 if args.quick else STEPS)
    updates(args.quick)


if __name__ == "__main__":
    main()
