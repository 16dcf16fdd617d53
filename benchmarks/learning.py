"""Learning: PPO on CartPole-v1 in rl-suite and in stable-baselines3, same hyperparameters.

    python benchmarks/learning.py            # full run: a few minutes on an otherwise idle machine
    python benchmarks/learning.py --quick    # seconds; checks it still works, numbers mean nothing
    python benchmarks/learning.py --seeds 4 --threads 1 0  # 0: torch's default thread count

Both libraries train PPO for 100k environment steps of CartPole-v1, one run per seed and library,
and we report training speed (env steps/s) and the return reached. The issue's target: ours at
least 1.5 x SB3's steps/s at equal or better return.

Hyperparameters, the same on both sides (those of the ``cartpole`` preset, which the benchmark
checks before it starts: it stops if the preset no longer holds them):

- 8 environments x 32 steps per rollout (batch 256), 20 epochs of one minibatch of 256;
- discount 0.98, GAE lambda 0.8, Adam (eps 1e-8, torch's default; the preset may choose its
  implementation, ``foreach`` or ``fused``, and nothing else) at learning rate 1e-3, ratio clip
  0.2, both annealed linearly to 0 (ours: ``linear_lr_schedule=True`` scales the ratio clip
  too; SB3: the same schedule given as ``learning_rate`` and ``clip_range``, shifted by one
  update so that the k-th update of both uses the factor ``(n - k + 1) / n``: SB3 computes its
  progress after collecting a rollout, ours before);
- no entropy bonus; gradient norm clipped at 1.0 (our PPO's default; SB3's is 0.5);
- value loss: ours is ``value_loss_coeff * mean(0.5 * (value - return)^2)`` with coefficient 0.5,
  SB3's is ``vf_coef * mean((value - return)^2)``, so SB3 gets ``vf_coef=0.25``: the same loss;
- no advantage normalisation on either side (our preset keeps our PPO's default, off; SB3's
  default, on, is turned off); no value clipping, no observation normalisation;
- separate policy and value MLPs of [64, 64] with tanh on the 4 observations, then linear heads,
  all with torch's default initialisation (SB3: ``ortho_init=False``; its default ``MlpPolicy``
  otherwise has the same networks).

Two differences remain. Random streams differ, so runs differ step by step (hence several
seeds). At a time limit (500 steps) SB3 adds ``discount * V(final observation)`` to the last
reward and trains on that step; ours bootstraps the step before it with the value of the last
observation it saw and leaves the time-out step out of the loss (one step in 500).

What runs:

- rl-suite: ``rl_suite.train(make_config("cartpole", seed=...))``, the trainer as a user runs it:
  the serial sampler stepping 8 environments in the run's process, 390 iterations (99,840 steps:
  100k in whole batches of 256, 10 log intervals of 39 iterations), an evaluation of 16 episodes
  (8 environments) before training and at the end of each log interval, then a row of
  ``progress.csv`` and a checkpoint (the agent and optimizer, the sampler's state); its console
  log goes to /dev/null (SB3 runs with ``verbose=0``), its progress bar stays on stderr;
- SB3: ``PPO("MlpPolicy", DummyVecEnv([gymnasium.make("CartPole-v1")] * 8), device="cpu")``
  learning for exactly as many steps as ours (``total_timesteps`` = our 99,840, so 390 updates
  on both sides).

Measured, the same way on both sides:

- train s: the time spent training, evaluation excluded. Ours: ``CumTrainTime`` of the last row of
  ``progress.csv``, which runs from the end of the runner's startup (environments made, agent and
  optimizer built) to the last row, less the time of the evaluations: sampling, optimisation,
  logging and the checkpoints but the last. SB3: ``time.perf_counter`` around ``model.learn``
  (it evaluates nothing; the model is built before). steps/s = env steps / train s.
- wall s: ours, the whole ``rl_suite.train`` call (building, startup, 11 evaluations, the last
  checkpoint); SB3, building the model and ``learn``. Printed, not compared with a target.
- return: after training, outside all timing, 20 whole episodes of CartPole-v1 with actions
  sampled from the policy (stochastic, as our evaluation does by default), played one after
  another in one environment: ours ``rl_suite.evaluate(run_dir, episodes=20, seed=12345)`` on
  the last checkpoint; SB3 ``evaluate_policy(model, env, n_eval_episodes=20,
  deterministic=False)`` with a ``DummyVecEnv`` of one ``Monitor``-wrapped environment seeded
  12345. Mean and standard deviation of the 20 returns.

Each run is its own fresh process, started with ``spawn``: a new interpreter that imports only its
own library (nothing is imported or warmed up by another run) and sets ``torch.set_num_threads``
before anything else: 1 thread on both sides by default (``--threads 1 0`` adds rows with torch's
default, as many as cores). The runs go one at a time, ours first for even seeds and SB3 first
for odd ones. The comparison uses the mean train time over the seeds; the return condition holds
when ours' mean return is at least SB3's, or both reach CartPole-v1's reward threshold (475).
The load average printed before and after says whether the machine was quiet: compare only
quiet runs.

``--quick``: 2048 steps (8 iterations, one log interval), one seed, 2 evaluation episodes.

DQN (CartPole-v1 with the zoo's settings, and Pong with the Nature CNN) has its own script under
the same rules: ``python benchmarks/learning_dqn.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import multiprocessing
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Nothing heavy at module level: each spawned run re-imports this module, and must import only
# its own library.

ENV_ID = "CartPole-v1"
PRESET = "cartpole"
N_ENVS = 8
N_STEPS = 32  # per environment per rollout
BATCH = N_ENVS * N_STEPS
EPOCHS = 20
MINIBATCHES = 1  # one minibatch of BATCH per epoch
DISCOUNT = 0.98
GAE_LAMBDA = 0.8
LEARNING_RATE = 1e-3
RATIO_CLIP = 0.2
VALUE_LOSS_COEFF = 0.5  # ours, on 0.5 * squared error: SB3's vf_coef on squared error is half
MAX_GRAD_NORM = 1.0
ADAM_EPS = 1e-8  # torch's default, which ours keeps (SB3's default is 1e-5)
HIDDEN = [64, 64]
EVAL_SEED = 12345  # of the evaluations after training (rl_suite.evaluate's default seed)
REWARD_THRESHOLD = 475.0  # CartPole-v1's: "solved"
SPEED_TARGET = 1.5  # ours / SB3, steps/s

# The settings our cartpole preset must hold, checked on the built runner before any run.
OUR_ALGO = {
    "discount": DISCOUNT,
    "gae_lambda": GAE_LAMBDA,
    "learning_rate": LEARNING_RATE,
    "_base_ratio_clip": RATIO_CLIP,
    "epochs": EPOCHS,
    "minibatches": MINIBATCHES,
    "entropy_loss_coeff": 0.0,
    "value_loss_coeff": VALUE_LOSS_COEFF,
    "clip_grad_norm": MAX_GRAD_NORM,
    "linear_lr_schedule": True,
    "normalize_advantage": False,
}
# Adam's options our preset may set: the implementation only (SB3 keeps torch's default one).
IMPLEMENTATION_OPTIONS = {"foreach", "fused"}


@dataclass(frozen=True)
class Sizes:
    steps: int  # asked of our trainer; SB3 runs as many as ours does
    log_interval_steps: int | None  # None: the preset's
    eval_episodes: int
    seeds: int  # default number of seeds


FULL = Sizes(steps=100_000, log_interval_steps=None, eval_episodes=20, seeds=2)
QUICK = Sizes(steps=2048, log_interval_steps=2048, eval_episodes=2, seeds=1)


@dataclass(frozen=True)
class Run:
    library: str
    seed: int
    threads: int  # torch.get_num_threads() in the run's process
    steps: int  # environment steps trained
    train_s: float  # evaluation excluded
    wall_s: float
    returns: list[float]  # of the evaluation episodes after training

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.train_s


def set_threads(threads: int) -> int:
    """``torch.set_num_threads(threads)`` unless 0 (torch's default); the count in effect."""
    import torch

    if threads > 0:
        torch.set_num_threads(threads)
    return torch.get_num_threads()


# ---------------------------------------------------------------------------------- rl-suite


def our_config(sizes: Sizes, seed: int) -> dict[str, Any]:
    import rl_suite

    config = rl_suite.make_config(PRESET, seed=seed, steps=sizes.steps)
    if sizes.log_interval_steps is not None:
        rl_suite.apply_overrides(config, [f"runner.log_interval_steps={sizes.log_interval_steps}"])
    return config


def plan(sizes: Sizes) -> int:
    """Build (and start nothing of) our runner for the preset; check that it holds the
    hyperparameters above; return the env steps it will train (whole log intervals)."""
    import torch

    import rl_suite

    config = our_config(sizes, seed=0)
    runner = rl_suite.build(config)
    algo = runner.algo
    wrong = {
        name: getattr(algo, name)
        for name, value in OUR_ALGO.items()
        if getattr(algo, name) != value
    }
    if type(algo).__name__ != "PPO" or algo.OptimCls is not torch.optim.Adam:
        wrong["algorithm"] = f"{type(algo).__name__} with {algo.OptimCls.__name__}"
    if set(algo.optim_kwargs) - IMPLEMENTATION_OPTIONS:
        wrong["optim_kwargs"] = algo.optim_kwargs
    sampler = config["sampler"]
    if (sampler["kind"], sampler["batch_B"], sampler["batch_T"]) != ("serial", N_ENVS, N_STEPS):
        wrong["sampler"] = sampler
    if config["agent"] != {"recurrent": False, "deterministic_eval": False, "model_kwargs": {}}:
        wrong["agent"] = config["agent"]  # the default model: separate [64, 64] tanh MLPs
    if config["env"] != ENV_ID or config["device"] != "cpu":
        wrong["env, device"] = (config["env"], config["device"])
    if config["runner"]["snapshot_mode"] == "none":
        wrong["snapshot_mode"] = "none: rl_suite.evaluate needs the last checkpoint"
    if wrong:
        raise RuntimeError(f"the {PRESET!r} preset no longer matches this benchmark: {wrong}")
    return runner.n_itr * runner.itr_batch_size


def last_row(progress_csv: Path) -> dict[str, str]:
    with open(progress_csv, newline="") as f:
        return list(csv.DictReader(f))[-1]


def run_ours(sizes: Sizes, seed: int, threads: int) -> Run:
    threads = set_threads(threads)
    import rl_suite

    config = our_config(sizes, seed)
    with (
        tempfile.TemporaryDirectory(prefix="learning-bench-") as log_dir,
        open(os.devnull, "w") as devnull,
        contextlib.redirect_stdout(devnull),
    ):
        start = time.perf_counter()
        run_dir = rl_suite.train(config, log_dir=log_dir)
        wall_s = time.perf_counter() - start
        row = last_row(run_dir / "progress.csv")
        infos = rl_suite.evaluate(run_dir, episodes=sizes.eval_episodes, seed=EVAL_SEED)
    return Run(
        library="rl-suite",
        seed=seed,
        threads=threads,
        steps=int(row["CumSteps"]),
        train_s=float(row["CumTrainTime"]),
        wall_s=wall_s,
        returns=[float(info.Return) for info in infos],
    )


# ---------------------------------------------------------------------------------- SB3


def make_cartpole() -> Any:
    import gymnasium

    return gymnasium.make(ENV_ID)


def make_monitored_cartpole() -> Any:
    from stable_baselines3.common.monitor import Monitor

    return Monitor(make_cartpole())


def annealed(start: float, n_updates: int) -> Callable[[float], float]:
    """SB3 schedule: ``start`` times our factor. SB3 passes ``progress = 1 - k / n`` to the k-th
    update (k = 1 .. n, after collecting its rollout); ours uses ``(n - k + 1) / n`` there."""

    def schedule(progress: float) -> float:
        return start * min(1.0, progress + 1.0 / n_updates)

    return schedule


def run_sb3(sizes: Sizes, seed: int, threads: int, steps: int) -> Run:
    threads = set_threads(threads)
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import DummyVecEnv

    n_updates = steps // BATCH
    start = time.perf_counter()
    model = PPO(
        "MlpPolicy",
        DummyVecEnv([make_cartpole] * N_ENVS),
        learning_rate=annealed(LEARNING_RATE, n_updates),
        n_steps=N_STEPS,
        batch_size=BATCH // MINIBATCHES,
        n_epochs=EPOCHS,
        gamma=DISCOUNT,
        gae_lambda=GAE_LAMBDA,
        clip_range=annealed(RATIO_CLIP, n_updates),
        normalize_advantage=False,
        ent_coef=0.0,
        vf_coef=VALUE_LOSS_COEFF / 2,
        max_grad_norm=MAX_GRAD_NORM,
        policy_kwargs=dict(
            net_arch=dict(pi=HIDDEN, vf=HIDDEN),
            activation_fn=torch.nn.Tanh,
            ortho_init=False,
            optimizer_kwargs=dict(eps=ADAM_EPS),
        ),
        seed=seed,
        device="cpu",
        verbose=0,
    )
    learn_start = time.perf_counter()
    model.learn(total_timesteps=steps)
    end = time.perf_counter()
    if model.num_timesteps != steps:
        raise RuntimeError(f"SB3 trained {model.num_timesteps} steps, not {steps}")
    eval_env = DummyVecEnv([make_monitored_cartpole])
    eval_env.seed(EVAL_SEED)
    returns, _ = evaluate_policy(
        model,
        eval_env,
        n_eval_episodes=sizes.eval_episodes,
        deterministic=False,
        return_episode_rewards=True,
    )
    eval_env.close()
    return Run(
        library="SB3",
        seed=seed,
        threads=threads,
        steps=model.num_timesteps,
        train_s=end - learn_start,
        wall_s=end - start,
        returns=[float(r) for r in returns],
    )


def in_fresh_process(func: Callable[..., Any], *args: object) -> Any:
    """Run func in a new interpreter (spawn), alone: it imports what it needs itself."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(func, *args).result()


# ---------------------------------------------------------------------------------- printing


def return_text(returns: list[float]) -> str:
    spread = statistics.pstdev(returns) if len(returns) > 1 else 0.0
    return f"{statistics.fmean(returns):.1f} +- {spread:.1f}"


def print_runs(runs: list[Run], eval_episodes: int) -> None:
    print(f"\n(a) each run: PPO on {ENV_ID}, {N_ENVS} envs x {N_STEPS} steps, {EPOCHS} epochs")
    header = (
        f"{'threads':>7}{'seed':>6}  {'library':<10}{'env steps':>11}{'train s':>10}"
        f"{'steps/s':>10}{'wall s':>9}  return, {eval_episodes} episodes"
    )
    print(header)
    print("-" * len(header))
    for run in runs:
        print(
            f"{run.threads:>7}{run.seed:>6}  {run.library:<10}{run.steps:>11,}{run.train_s:>10.1f}"
            f"{run.steps_per_s:>10,.0f}{run.wall_s:>9.1f}  {return_text(run.returns)}"
        )


def print_ratios(runs: list[Run]) -> None:
    print(
        "\n(b) rl-suite / SB3 per torch thread count (steps/s: from the mean train time over the "
        "seeds)"
    )
    header = (
        f"{'threads':>7}{'ours steps/s':>14}{'SB3 steps/s':>13}{'ratio':>7}{'target':>9}  "
        f"{'':<8}{'ours return':>12}{'SB3 return':>12}  {'':<7}{'wall ratio':>11}"
    )
    print(header)
    print("-" * len(header))
    for threads in dict.fromkeys(run.threads for run in runs):
        ours = [r for r in runs if r.threads == threads and r.library == "rl-suite"]
        sb3 = [r for r in runs if r.threads == threads and r.library == "SB3"]
        rates = [
            statistics.fmean(r.steps for r in side) / statistics.fmean(r.train_s for r in side)
            for side in (ours, sb3)
        ]
        ratio = rates[0] / rates[1]
        speed = "met" if ratio >= SPEED_TARGET else "NOT met"
        returns = [statistics.fmean(x for r in side for x in r.returns) for side in (ours, sb3)]
        as_good = returns[0] >= returns[1] or min(returns) >= REWARD_THRESHOLD
        wall_ratio = statistics.fmean(r.wall_s for r in sb3) / statistics.fmean(
            r.wall_s for r in ours
        )
        print(
            f"{threads:>7}{rates[0]:>14,.0f}{rates[1]:>13,.0f}{ratio:>7.2f}"
            f"{f'>= {SPEED_TARGET:g}':>9}  {speed:<8}{returns[0]:>12.1f}{returns[1]:>12.1f}  "
            f"{'ok' if as_good else 'WORSE':<7}{wall_ratio:>11.2f}"
        )
    print(
        "wall ratio: SB3's mean wall time / ours (ours includes its evaluations during training)"
        f"\nreturn ok: ours' mean >= SB3's, or both >= {REWARD_THRESHOLD:g}"
    )


def print_load(when: str) -> None:
    """Another process on the machine slows every figure: compare only quiet runs."""
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"load average {when}: {load} (1, 5, 15 min) on {os.cpu_count()} cores", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a few seconds, no timing claims")
    parser.add_argument("--seeds", type=int, help="seeds 0 .. N-1 (default: 2, 1 with --quick)")
    parser.add_argument(
        "--threads",
        type=int,
        nargs="+",
        default=[1],
        help="torch thread counts to run both libraries with, 0 for torch's default (default: 1)",
    )
    args = parser.parse_args()
    sizes = QUICK if args.quick else FULL
    seeds = range(sizes.seeds if args.seeds is None else args.seeds)
    if not seeds or any(t < 0 for t in args.threads):
        parser.error("--seeds must be at least 1 and --threads at least 0")
    if args.quick:
        print("--quick: a few thousand steps, 2 evaluation episodes; these numbers mean nothing.")
    print(
        f"PPO on {ENV_ID}: the {PRESET!r} preset of rl-suite against stable-baselines3,\n"
        "each run in its own fresh process (spawn), one at a time.",
        flush=True,
    )
    print_load("before")
    steps = in_fresh_process(plan, sizes)
    runs: list[Run] = []
    for threads in args.threads:
        for seed in seeds:
            order = ["ours", "sb3"] if seed % 2 == 0 else ["sb3", "ours"]
            for side in order:
                if side == "ours":
                    run = in_fresh_process(run_ours, sizes, seed, threads)
                else:
                    run = in_fresh_process(run_sb3, sizes, seed, threads, steps)
                if run.steps != steps:
                    raise RuntimeError(f"{run.library} trained {run.steps} steps, not {steps}")
                print(
                    f"  threads {run.threads}, seed {seed}: {run.library} trained in "
                    f"{run.train_s:.1f} s ({run.wall_s:.1f} s wall)",
                    flush=True,
                )
                runs.append(run)
    print_runs(runs, sizes.eval_episodes)
    print_ratios(runs)
    print_load("after")


if __name__ == "__main__":
    main()
