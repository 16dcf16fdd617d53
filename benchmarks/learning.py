"""Learning: PPO on CartPole-v1, SAC and TD3 on Pendulum-v1, in rl-suite and in
stable-baselines3, same hyperparameters.

    python benchmarks/learning.py               # all three tasks; SAC and TD3 take the longest
    python benchmarks/learning.py --task sac    # one task: ppo, sac or td3
    python benchmarks/learning.py --quick       # under a minute; checks it still works
    python benchmarks/learning.py --seeds 4 --threads 1 0  # 0: torch's default thread count

For each task both libraries train for the same number of environment steps, one run per seed
and library, and we report training speed (env steps/s) and the return reached. The issues'
target: ours at least 1.5 x SB3's steps/s at equal or better return.

PPO on CartPole-v1
------------------

Both libraries train PPO for 100k environment steps of CartPole-v1. Hyperparameters, the same
on both sides (those of the ``cartpole`` preset, which the benchmark
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

SAC and TD3 on Pendulum-v1
--------------------------

Both libraries train for 20k environment steps of Pendulum-v1 (200-step episodes, actions in
[-2, 2]), one environment, one update per step. Ours: the ``pendulum-sac`` and
``pendulum-td3`` presets, which the benchmark checks on the built runner before it starts (it
stops if a preset no longer holds a value below). SB3: ``SAC`` / ``TD3("MlpPolicy",
DummyVecEnv([gymnasium.make("Pendulum-v1")]), device="cpu", ...)`` given the same values:

- one environment stepped once between updates, one update on each step once learning has
  started (ours: ``batch_T=1``, ``batch_B=1``, ``replay_ratio`` = ``batch_size``; SB3:
  ``train_freq=1``, ``gradient_steps=1``);
- learning starts after 1,000 steps (SAC) or 2,000 (TD3): the first update follows the
  1,001st (2,001st) step on both sides (ours ``min_steps_learn``: no update before iteration
  1,000; SB3 ``learning_starts``: it trains once ``num_timesteps > learning_starts``), so both
  take 19,000 (18,000) updates, which the benchmark checks. Before that the actions differ:
  SB3 draws them uniformly from the action space (TD3: plus its action noise); ours adds
  Gaussian noise to the untrained policy's mean, ``pretrain_std`` 0.75 (SAC, before the tanh)
  or 0.5 (TD3), as rlpyt does;
- replay of 100,000 transitions (the whole run), uniform, 1-step returns; batches of 256 (SAC)
  or 100 (TD3); discount 0.99 (SAC) or 0.98 (TD3); target networks moved by Polyak averaging
  with tau 0.005 (SAC: after every update; TD3: with every policy update);
- Adam at a constant 1e-3 for the policy, the critics (one optimizer for both) and SAC's
  temperature, eps 1e-8 (torch's default, both sides; ours runs its ``fused`` form, the same
  update in one kernel); no gradient clipping (ours: norms clipped at 1e9 / 1e8, never
  reached);
- networks: MLPs with ReLU and torch's default initialisation on the 3 observations, two
  critics on (observation, action) concatenated, no shared layers; SAC [256, 256] for the
  policy and each critic, the policy giving the mean and log std (clamped to [-20, 2]) of a
  Gaussian squashed by tanh; TD3 [400, 300], the policy's output through tanh; actions in
  [-1, 1] scaled to the action space's bounds on both sides;
- SAC: twin critics regress (``0.5 * (y - Q)**2`` each, summed) on ``y = r + gamma * (1 -
  done) * (min(Q1', Q2')(s', a') - alpha * log pi(a'|s'))``, a' drawn from the policy; the
  policy minimises ``alpha * log pi - min(Q1, Q2)``; the temperature, from alpha 1, descends
  ``-log_alpha * (log pi + target_entropy)``, ``target_entropy = -1`` (-(action dims)); every
  update uses alpha as it was before that update's temperature step, on both sides;
- TD3: both critics regress on ``y = r + gamma * (1 - done) * min(Q1', Q2')(s', a')`` with the
  target policy smoothed, ``a' = clip(mu'(s') + clip(N(0, 0.2), -0.5, 0.5), -1, 1)``; the
  policy (ascending Q1) and the targets update on every second update (the 2nd, 4th ...);
  exploration noise N(0, 0.1) on the [-1, 1] action, clipped to [-1, 1]. Ours regresses on
  ``0.5 * (y - Q)**2`` per critic where SB3 has ``(y - Q)**2``: half the gradient, the same
  Adam step up to its eps.

What remains different: random streams (hence several seeds), the actions before learning
starts (above), and time limits. Pendulum-v1 never terminates, and every episode is cut by its
200-step time limit: SB3 (``handle_timeout_termination``) stores the final observation and
bootstraps the cut transition from it; ours (``bootstrap_timelimit=True``, rlpyt's way)
leaves that transition out of the critic's loss (one in 200).

What runs and how it is measured is as for PPO above, but for these: ours also evaluates 10
episodes every 1,000 steps and saves a checkpoint then (the preset's log interval; the
evaluations are left out of train s, the checkpoints are not); the return after training is
that of 10 episodes played deterministically (ours: the policy's mean action, what our
evaluation always does; SB3 ``deterministic=True``), one after another in one environment
seeded 12345; the return condition holds when ours' mean return is at least SB3's, or both
reach -200 (the bar of our learning tests: Pendulum-v1 has no reward threshold).

``--quick``: PPO for 2048 steps (8 iterations, one log interval); SAC and TD3 for 400 steps,
learning from step 301 on both sides (100 updates); one seed, 2 evaluation episodes.

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

TASKS = ("ppo", "sac", "td3")
EVAL_SEED = 12345  # of the evaluations after training (rl_suite.evaluate's default seed)
SPEED_TARGET = 1.5  # ours / SB3, steps/s

# ---------------------------------------------------------------------------------- PPO

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
REWARD_THRESHOLD = 475.0  # CartPole-v1's: "solved"

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
# Adam's options our presets may set: the implementation only (SB3 keeps torch's default one).
IMPLEMENTATION_OPTIONS = {"foreach", "fused"}

# ---------------------------------------------------------------------------------- SAC, TD3

PENDULUM_ID = "Pendulum-v1"
PENDULUM_BAR = -200.0  # our learning tests' bar (Pendulum-v1 has no reward threshold)
# The settings of our pendulum-sac and pendulum-td3 presets, given to SB3 and checked on our
# built runner before any run (SB3's names).
QPG = {
    "sac": dict(
        preset="pendulum-sac",
        gamma=0.99,
        batch_size=256,
        buffer_size=100_000,
        learning_starts=1_000,
        learning_rate=1e-3,
        tau=0.005,
        net_arch=[256, 256],
    ),
    "td3": dict(
        preset="pendulum-td3",
        gamma=0.98,
        batch_size=100,
        buffer_size=100_000,
        learning_starts=2_000,
        learning_rate=1e-3,
        tau=0.005,
        net_arch=[400, 300],
        action_noise=0.1,
        policy_delay=2,
        target_policy_noise=0.2,
        target_noise_clip=0.5,
    ),
}


@dataclass(frozen=True)
class Sizes:
    steps: int  # asked of our trainer; SB3 runs as many as ours does
    log_interval_steps: int | None  # None: the preset's
    eval_episodes: int
    seeds: int  # default number of seeds
    learning_starts: int | None = None  # SAC, TD3: None for the preset's


FULL = {
    "ppo": Sizes(steps=100_000, log_interval_steps=None, eval_episodes=20, seeds=2),
    "sac": Sizes(steps=20_000, log_interval_steps=None, eval_episodes=10, seeds=2),
    "td3": Sizes(steps=20_000, log_interval_steps=None, eval_episodes=10, seeds=2),
}
QUICK = {
    "ppo": Sizes(steps=2048, log_interval_steps=2048, eval_episodes=2, seeds=1),
    # (our replay needs a batch's worth of steps, 256 for SAC, before its first batch)
    "sac": Sizes(steps=400, log_interval_steps=200, eval_episodes=2, seeds=1, learning_starts=300),
    "td3": Sizes(steps=400, log_interval_steps=200, eval_episodes=2, seeds=1, learning_starts=300),
}


@dataclass(frozen=True)
class Run:
    task: str
    library: str
    seed: int
    threads: int  # torch.get_num_threads() in the run's process
    steps: int  # environment steps trained
    updates: int  # gradient steps
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


def learning_starts(task: str, sizes: Sizes) -> int:
    return QPG[task]["learning_starts"] if sizes.learning_starts is None else sizes.learning_starts


# ---------------------------------------------------------------------------------- rl-suite


def our_config(task: str, sizes: Sizes, seed: int, threads: int = 1) -> dict[str, Any]:
    """The task's preset, sized, with ``threads`` torch threads (0: torch's default; the
    presets set 1)."""
    import rl_suite

    config = rl_suite.make_config(
        PRESET if task == "ppo" else QPG[task]["preset"], seed=seed, steps=sizes.steps
    )
    overrides = [f"torch_threads={threads or None}"]
    if sizes.log_interval_steps is not None:
        overrides.append(f"runner.log_interval_steps={sizes.log_interval_steps}")
    if task != "ppo" and sizes.learning_starts is not None:
        overrides.append(f"algo_kwargs.min_steps_learn={sizes.learning_starts}")
    return rl_suite.apply_overrides(config, overrides)


def ppo_mismatches(config: dict[str, Any], runner: Any) -> dict[str, Any]:
    """What the built PPO runner holds that differs from the hyperparameters above."""
    import torch

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
    if config["env"] != ENV_ID:
        wrong["env"] = config["env"]
    return wrong


def qpg_mismatches(task: str, sizes: Sizes, config: dict[str, Any], runner: Any) -> dict[str, Any]:
    """What the built SAC or TD3 runner holds that differs from ``QPG[task]``."""
    import torch

    want = QPG[task]
    algo, agent = runner.algo, runner.agent
    values: dict[str, Any] = {
        "discount": want["gamma"],
        "batch_size": want["batch_size"],
        "replay_ratio": want["batch_size"],  # one update per step of one environment
        "replay_size": want["buffer_size"],
        "min_steps_learn": learning_starts(task, sizes),
        "learning_rate": want["learning_rate"],
        "target_update_tau": want["tau"],
        "n_step_return": 1,
        "bootstrap_timelimit": True,
        "OptimCls": torch.optim.Adam,
    }
    hidden = {"hidden_sizes": want["net_arch"]}
    if task == "sac":
        values.update(
            target_update_interval=1, fixed_alpha=None, target_entropy="auto", reward_scale=1
        )
        values["action_prior"] = "uniform"
        agent_values = {"pretrain_std": 0.75}
    else:
        values.update(
            q_learning_rate=want["learning_rate"],
            target_update_interval=want["policy_delay"],
            policy_update_interval=want["policy_delay"],
            q_target_clip=1e6,
        )
        agent_values = {
            "action_std": want["action_noise"],
            "action_noise_clip": None,
            "pretrain_std": 0.5,
            "target_noise_std": want["target_policy_noise"],
            "target_noise_clip": want["target_noise_clip"],
        }
    agent_values.update(model_kwargs=hidden, q_model_kwargs=hidden)
    wrong = {name: getattr(algo, name) for name, v in values.items() if getattr(algo, name) != v}
    wrong.update(
        {
            name: getattr(agent, name)
            for name, v in agent_values.items()
            if getattr(agent, name) != v
        }
    )
    if type(algo).__name__ != task.upper():
        wrong["algorithm"] = type(algo).__name__
    if set(algo.optim_kwargs) - IMPLEMENTATION_OPTIONS:
        wrong["optim_kwargs"] = algo.optim_kwargs
    if algo.clip_grad_norm < 1e8:  # SB3 clips no gradient
        wrong["clip_grad_norm"] = algo.clip_grad_norm
    sampler = config["sampler"]
    if (sampler["kind"], sampler["batch_B"], sampler["batch_T"]) != ("serial", 1, 1):
        wrong["sampler"] = sampler
    if config["env"] != PENDULUM_ID or config["env_kwargs"]:
        wrong["env"] = (config["env"], config["env_kwargs"])
    return wrong


def plan(task: str, sizes: Sizes) -> int:
    """Build (and start nothing of) our runner for the task's preset; check that it holds the
    hyperparameters above; return the env steps it will train (whole log intervals)."""
    import rl_suite

    config = our_config(task, sizes, seed=0)
    runner = rl_suite.build(config)
    if task == "ppo":
        wrong = ppo_mismatches(config, runner)
    else:
        wrong = qpg_mismatches(task, sizes, config, runner)
    if config["device"] != "cpu":
        wrong["device"] = config["device"]
    if config["runner"]["snapshot_mode"] == "none":
        wrong["snapshot_mode"] = "none: rl_suite.evaluate needs the last checkpoint"
    if wrong:
        raise RuntimeError(f"our {task} preset no longer matches this benchmark: {wrong}")
    return runner.n_itr * runner.itr_batch_size


def last_row(progress_csv: Path) -> dict[str, str]:
    with open(progress_csv, newline="") as f:
        return list(csv.DictReader(f))[-1]


def run_ours(task: str, sizes: Sizes, seed: int, threads: int) -> Run:
    in_effect = set_threads(threads)
    import rl_suite

    config = our_config(task, sizes, seed, threads)
    with (
        tempfile.TemporaryDirectory(prefix="learning-bench-") as log_dir,
        open(os.devnull, "w") as devnull,
        contextlib.redirect_stdout(devnull),
    ):
        start = time.perf_counter()
        run_dir = rl_suite.train(config, log_dir=log_dir)
        wall_s = time.perf_counter() - start
        row = last_row(run_dir / "progress.csv")
        infos = rl_suite.evaluate(
            run_dir, episodes=sizes.eval_episodes, deterministic=task != "ppo", seed=EVAL_SEED
        )
    return Run(
        task=task,
        library="rl-suite",
        seed=seed,
        threads=in_effect,
        steps=int(row["CumSteps"]),
        updates=int(row["CumUpdates"]),
        train_s=float(row["CumTrainTime"]),
        wall_s=wall_s,
        returns=[float(info.Return) for info in infos],
    )


# ---------------------------------------------------------------------------------- SB3


def make_cartpole() -> Any:
    import gymnasium

    return gymnasium.make(ENV_ID)


def make_pendulum() -> Any:
    import gymnasium

    return gymnasium.make(PENDULUM_ID)


def annealed(start: float, n_updates: int) -> Callable[[float], float]:
    """SB3 schedule: ``start`` times our factor. SB3 passes ``progress = 1 - k / n`` to the k-th
    update (k = 1 .. n, after collecting its rollout); ours uses ``(n - k + 1) / n`` there."""

    def schedule(progress: float) -> float:
        return start * min(1.0, progress + 1.0 / n_updates)

    return schedule


def sb3_ppo(seed: int, steps: int) -> Any:
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv

    n_updates = steps // BATCH
    return PPO(
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


def sb3_qpg(task: str, sizes: Sizes, seed: int) -> Any:
    """SB3's SAC or TD3 with ``QPG[task]``'s settings."""
    import numpy as np
    from stable_baselines3 import SAC, TD3
    from stable_baselines3.common.noise import NormalActionNoise
    from stable_baselines3.common.vec_env import DummyVecEnv

    want = QPG[task]
    common = dict(
        learning_rate=want["learning_rate"],
        buffer_size=want["buffer_size"],
        learning_starts=learning_starts(task, sizes),
        batch_size=want["batch_size"],
        tau=want["tau"],
        gamma=want["gamma"],
        train_freq=1,
        gradient_steps=1,
        policy_kwargs=dict(net_arch=want["net_arch"], optimizer_kwargs=dict(eps=ADAM_EPS)),
        seed=seed,
        device="cpu",
        verbose=0,
    )
    env = DummyVecEnv([make_pendulum])
    if task == "sac":
        return SAC(
            "MlpPolicy",
            env,
            ent_coef="auto",
            target_entropy="auto",
            target_update_interval=1,
            **common,
        )
    noise = NormalActionNoise(mean=np.zeros(1), sigma=np.full(1, want["action_noise"]))
    return TD3(
        "MlpPolicy",
        env,
        action_noise=noise,
        policy_delay=want["policy_delay"],
        target_policy_noise=want["target_policy_noise"],
        target_noise_clip=want["target_noise_clip"],
        **common,
    )


def run_sb3(task: str, sizes: Sizes, seed: int, threads: int, steps: int) -> Run:
    threads = set_threads(threads)
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv

    start = time.perf_counter()
    model = sb3_ppo(seed, steps) if task == "ppo" else sb3_qpg(task, sizes, seed)
    learn_start = time.perf_counter()
    model.learn(total_timesteps=steps)
    end = time.perf_counter()
    if model.num_timesteps != steps:
        raise RuntimeError(f"SB3 trained {model.num_timesteps} steps, not {steps}")
    make_env = make_cartpole if task == "ppo" else make_pendulum
    eval_env = DummyVecEnv([lambda: Monitor(make_env())])
    eval_env.seed(EVAL_SEED)
    returns, _ = evaluate_policy(
        model,
        eval_env,
        n_eval_episodes=sizes.eval_episodes,
        deterministic=task != "ppo",
        return_episode_rewards=True,
    )
    eval_env.close()
    return Run(
        task=task,
        library="SB3",
        seed=seed,
        threads=threads,
        steps=model.num_timesteps,
        updates=model._n_updates,
        train_s=end - learn_start,
        wall_s=end - start,
        returns=[float(r) for r in returns],
    )


def in_fresh_process(func: Callable[..., Any], *args: object) -> Any:
    """Run func in a new interpreter (spawn), alone: it imports what it needs itself."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(func, *args).result()


# ---------------------------------------------------------------------------------- printing

TASK_TITLES = {
    "ppo": f"PPO on {ENV_ID}, {N_ENVS} envs x {N_STEPS} steps, {EPOCHS} epochs",
    "sac": f"SAC on {PENDULUM_ID}, one update of {QPG['sac']['batch_size']} per step",
    "td3": f"TD3 on {PENDULUM_ID}, one update of {QPG['td3']['batch_size']} per step",
}
# A return is as good as the other's when at least it, or when both reach this.
GOOD_ENOUGH = {"ppo": REWARD_THRESHOLD, "sac": PENDULUM_BAR, "td3": PENDULUM_BAR}


def return_text(returns: list[float]) -> str:
    spread = statistics.pstdev(returns) if len(returns) > 1 else 0.0
    return f"{statistics.fmean(returns):.1f} +- {spread:.1f}"


def print_runs(runs: list[Run]) -> None:
    print("\n(a) each run")
    header = (
        f"{'task':<5}{'threads':>8}{'seed':>5}  {'library':<10}{'env steps':>10}{'updates':>9}"
        f"{'train s':>9}{'steps/s':>9}{'wall s':>8}  return after training"
    )
    print(header)
    print("-" * len(header))
    for run in runs:
        print(
            f"{run.task:<5}{run.threads:>8}{run.seed:>5}  {run.library:<10}{run.steps:>10,}"
            f"{run.updates:>9,}{run.train_s:>9.1f}{run.steps_per_s:>9,.0f}{run.wall_s:>8.1f}  "
            f"{return_text(run.returns)} ({len(run.returns)} episodes)"
        )


def print_ratios(runs: list[Run]) -> None:
    print(
        "\n(b) rl-suite / SB3 per task and torch thread count (steps/s: from the mean train time "
        "over the seeds)"
    )
    header = (
        f"{'task':<5}{'threads':>8}{'ours steps/s':>14}{'SB3 steps/s':>13}{'ratio':>7}"
        f"{'target':>9}  {'':<8}{'ours return':>12}{'SB3 return':>12}  {'':<7}{'wall ratio':>11}"
    )
    print(header)
    print("-" * len(header))
    for task, threads in dict.fromkeys((run.task, run.threads) for run in runs):
        ours = [r for r in runs if (r.task, r.threads, r.library) == (task, threads, "rl-suite")]
        sb3 = [r for r in runs if (r.task, r.threads, r.library) == (task, threads, "SB3")]
        rates = [
            statistics.fmean(r.steps for r in side) / statistics.fmean(r.train_s for r in side)
            for side in (ours, sb3)
        ]
        ratio = rates[0] / rates[1]
        speed = "met" if ratio >= SPEED_TARGET else "NOT met"
        returns = [statistics.fmean(x for r in side for x in r.returns) for side in (ours, sb3)]
        as_good = returns[0] >= returns[1] or min(returns) >= GOOD_ENOUGH[task]
        wall_ratio = statistics.fmean(r.wall_s for r in sb3) / statistics.fmean(
            r.wall_s for r in ours
        )
        print(
            f"{task:<5}{threads:>8}{rates[0]:>14,.0f}{rates[1]:>13,.0f}{ratio:>7.2f}"
            f"{f'>= {SPEED_TARGET:g}':>9}  {speed:<8}{returns[0]:>12.1f}{returns[1]:>12.1f}  "
            f"{'ok' if as_good else 'WORSE':<7}{wall_ratio:>11.2f}"
        )
    print(
        "wall ratio: SB3's mean wall time / ours (ours includes its evaluations during training)"
        f"\nreturn ok: ours' mean >= SB3's, or both >= {REWARD_THRESHOLD:g} (ppo) or "
        f"{PENDULUM_BAR:g} (sac, td3)"
    )


def print_load(when: str) -> None:
    """Another process on the machine slows every figure: compare only quiet runs."""
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"load average {when}: {load} (1, 5, 15 min) on {os.cpu_count()} cores", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="under a minute, no timing claims")
    parser.add_argument(
        "--task", choices=[*TASKS, "all"], default="all", help="ppo, sac, td3 or all (default)"
    )
    parser.add_argument("--seeds", type=int, help="seeds 0 .. N-1 (default: 2, 1 with --quick)")
    parser.add_argument(
        "--threads",
        type=int,
        nargs="+",
        default=[1],
        help="torch thread counts to run both libraries with, 0 for torch's default (default: 1)",
    )
    args = parser.parse_args()
    all_sizes = QUICK if args.quick else FULL
    tasks = list(TASKS) if args.task == "all" else [args.task]
    if (args.seeds is not None and args.seeds < 1) or any(t < 0 for t in args.threads):
        parser.error("--seeds must be at least 1 and --threads at least 0")
    if args.quick:
        print("--quick: a few hundred to a few thousand steps; these numbers mean nothing.")
    print(
        "rl-suite's presets against stable-baselines3, the same hyperparameters,\n"
        "each run in its own fresh process (spawn), one at a time.",
        flush=True,
    )
    print_load("before")
    runs: list[Run] = []
    for task in tasks:
        sizes = all_sizes[task]
        steps = in_fresh_process(plan, task, sizes)
        print(f"{task}: {TASK_TITLES[task]}, {steps:,} env steps", flush=True)
        seeds = range(sizes.seeds if args.seeds is None else args.seeds)
        for threads in args.threads:
            for seed in seeds:
                order = ["ours", "sb3"] if seed % 2 == 0 else ["sb3", "ours"]
                pair = []
                for side in order:
                    if side == "ours":
                        run = in_fresh_process(run_ours, task, sizes, seed, threads)
                    else:
                        run = in_fresh_process(run_sb3, task, sizes, seed, threads, steps)
                    if run.steps != steps:
                        raise RuntimeError(f"{run.library} trained {run.steps} steps, not {steps}")
                    print(
                        f"  threads {run.threads}, seed {seed}: {run.library} trained in "
                        f"{run.train_s:.1f} s ({run.wall_s:.1f} s wall)",
                        flush=True,
                    )
                    pair.append(run)
                if task != "ppo" and pair[0].updates != pair[1].updates:
                    raise RuntimeError(
                        f"{task}, seed {seed}: the two runs took different numbers of updates: "
                        + ", ".join(f"{r.library} {r.updates:,}" for r in pair)
                    )
                runs += pair
    print_runs(runs)
    print_ratios(runs)
    print_load("after")


if __name__ == "__main__":
    main()
