"""Learning suite: named cases on MuJoCo and Atari, each run by rl-suite and by
stable-baselines3 with the same hyperparameters (rl-baselines3-zoo's), one run per case, library
and seed; resumable; a generated report puts the two side by side (issue 33).

    python benchmarks/learning_suite.py run ppo-hopper              # both libraries, default seeds
    python benchmarks/learning_suite.py run ppo-pong --lib ours --seeds 1
    python benchmarks/learning_suite.py run all                     # every case, seed by seed
    python benchmarks/learning_suite.py status                      # done, in progress, missing
    python benchmarks/learning_suite.py report                      # results/README.md, PNGs
    python benchmarks/learning_suite.py --quick                     # CI: every case, tiny

Runs. Each run (case, library, seed) is its own subprocess, one after another (start several
``run`` commands at once to use more cores: a run in progress is locked, and skipped by the
others). Ours is the trainer as a user runs it, ``python -m rl_suite train ALGO --preset ...
--seed N --log-dir ... --set ...``, continued by ``python -m rl_suite resume RUN_DIR`` after a
stop; its ``progress.csv`` evaluation rows become the curve. SB3's is this script's ``_sb3``
command: SB3's algorithm with the zoo's wrappers (``make_vec_env``, ``make_atari_env`` and
``VecFrameStack(4)``, ``VecNormalize``), evaluated by a callback, and checkpointed (parameters
and optimizers, counters, ``VecNormalize`` statistics, the replay buffer) as plain tensors and
arrays, never pickles: a ``ckpt_<steps>`` directory made whole, then ``state.json`` naming it
replaced atomically. A finished run is not run again; a stopped or killed one continues from
its last checkpoint: ours from its last log interval (off-policy runs keep their replay,
``runner.checkpoint_replay=True``, so the continuation is exact), SB3's from its last
checkpoint (every evaluation for PPO, every tenth of the run for SAC, TD3 and DQN), with fresh
environments. SIGTERM or Ctrl-C: the run in progress checkpoints and exits, nothing else starts.

Results, per run, in ``benchmarks/results/<case>/<lib>/seed_<n>/`` (``--results`` elsewhere):
``curve.csv`` (env steps, mean and std of the evaluation returns, episodes) and ``run.json``
(commit, machine: CPU model, cores, load, versions of torch and the libraries; the commands,
wall time, training time and env steps/s, each attempt), committed; ``work/`` holds the run
directory or checkpoints, not committed. ``report`` writes ``results/README.md`` and
``results/<case>/comparison.png``.

Evaluation, the same protocol on both sides: before training, then after every 1/50 of the
budget (1/25 for Atari, whose games are long), whole episodes played one after another in one
environment (our ``sampler.eval_n_envs=1``; SB3 ``evaluate_policy`` on one environment): several
at once would fill the count with the short episodes first. 10 episodes on MuJoCo, 5 whole
games on Atari (every life; the raw game score: our ``GameScore``, SB3's ``Monitor`` outside
its ``AtariWrapper``). Deterministic for PPO on MuJoCo (as the zoo evaluates), SAC, TD3 and DQN
(greedy); PPO on Atari samples its actions (as the zoo evaluates Atari). The off-policy runs
skip the evaluations before learning starts (ours does; SB3 is made to). Training env steps/s:
env steps over training time, evaluations excluded, checkpoints included (ours ``CumTrainTime``;
SB3 ``learn`` less its evaluations). The budget is a whole number of evaluation intervals,
each a whole number of iterations (e.g. PPO on MuJoCo: 50 x 39 x 512 = 998,400 steps), the
same on both sides. One torch thread on both sides (``--threads``).

Cases (``CASES`` below): the zoo's hyperparameters, written as the zoo's files have them
(``ZOO_*``) and given to both sides, ours through the translation beside each; each case's
``notes`` list what still differs and why, and go into the report. Shared by all:

- MuJoCo tasks are v5 (gymnasium 1.x's); the zoo tuned on v4 and published figures on v3;
- PPO as SB3's: orthogonal initialisation where the zoo leaves it on (Walker2d, Atari),
  Gaussian actions clipped into the action space before the environment, MuJoCo rewards
  scaled as ``VecNormalize`` does (our ``orthogonal_init``, ``clip_action`` and
  ``normalize_reward``); the off-policy networks keep torch's initialisation on both sides;
- SB3 bootstraps a time-out from the final observation; ours leaves the cut transition out
  (SAC, TD3) or bootstraps the step before it (PPO); DQN on Atari runs no time-limit bootstrap
  (frame buffer);
- Atari: ``AtariEnv(obs_size=(84, 84), fire_on_reset=True)`` for SB3's ``AtariWrapper``: 84x84
  grayscale of the whole screen (INTER_AREA), frame skip 4 with a max over the last two, up to
  30 no-ops, FIRE after a reset, life loss ends the RL episode, rewards clipped, no sticky
  actions (the zoo's ``NoFrameskip-v4``), at most 27,000 steps per game (SB3:
  ``max_num_frames_per_episode=108000``). At a reset SB3 presses FIRE, then action 2, each for
  a step of 4 frames; ours FIRE for one frame.

How long, one run at a time on a 2-core Xeon shared with other work (load average 3 to 5),
from short runs: PPO on MuJoCo, ours 600-1,100 env steps/s and SB3 500-850, so about 0.5 h a
run (1 h on a busy machine); SAC and TD3, 40-60 steps/s once learning has started on both
sides: 1 to 1.5 h a run; PPO on Atari, ours 185-280 and SB3 145-205: 2.5 to 4 h a run; DQN on
Breakout, ours 80-95 and SB3 about 45 once learning has started: about 3.5 h ours, 6.5 h SB3
(its checkpoints write a 5.6 GB replay). All the runs asked for: about 48 hours, one at a time.

``--quick``: every case for one or two thousand steps (2 evaluations of 1 or 2 episodes, learning
from half the run), seed 0 of both libraries (SB3 where installed), in a temporary directory (or
``--results``), then ``status`` and ``report`` there: 4 to 6 minutes on 2 shared cores; what CI's
``benchmarks`` session runs. Its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import fcntl
import importlib.metadata
import json
import math
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
LIBS = ("ours", "sb3")
LIB_NAMES = {"ours": "rl-suite", "sb3": "SB3"}
EXIT_STOPPED = 75  # a run stopped by a signal after its checkpoint (rl-suite's code too)
MUJOCO_MAX_STEPS = 1_000  # the time limit of Hopper, HalfCheetah and Walker2d
ATARI_HORIZON = 27_000  # steps per game (AtariEnv's default: 108k frames)

# ------------------------------------------------------------------ the zoo's hyperparameters

# rl-baselines3-zoo (github.com/DLR-RM/rl-baselines3-zoo, hyperparams/*.yml as of v2.8.0; its
# MuJoCo entries say -v4), as written there; SB3's defaults (below) fill in the rest.
ZOO_PPO_ATARI = {
    "n_envs": 8,
    "n_steps": 128,
    "n_epochs": 4,
    "batch_size": 256,
    "learning_rate": "lin_2.5e-4",
    "clip_range": "lin_0.1",
    "vf_coef": 0.5,
    "ent_coef": 0.01,
}
_ZOO_PPO_NET = {
    "log_std_init": -2,
    "ortho_init": False,
    "activation_fn": "ReLU",
    "net_arch": {"pi": [256, 256], "vf": [256, 256]},
}
ZOO_PPO_MUJOCO = {  # (each also: normalize: true, n_envs: 1, n_timesteps: 1e6)
    "Hopper": {
        "batch_size": 32,
        "n_steps": 512,
        "gamma": 0.999,
        "learning_rate": 9.80828e-05,
        "ent_coef": 0.00229519,
        "clip_range": 0.2,
        "n_epochs": 5,
        "gae_lambda": 0.99,
        "max_grad_norm": 0.7,
        "vf_coef": 0.835671,
        "policy_kwargs": _ZOO_PPO_NET,
    },
    "HalfCheetah": {
        "batch_size": 64,
        "n_steps": 512,
        "gamma": 0.98,
        "learning_rate": 2.0633e-05,
        "ent_coef": 0.000401762,
        "clip_range": 0.1,
        "n_epochs": 20,
        "gae_lambda": 0.92,
        "max_grad_norm": 0.8,
        "vf_coef": 0.58096,
        "policy_kwargs": _ZOO_PPO_NET,
    },
    "Walker2d": {  # (no policy_kwargs: SB3's MlpPolicy, [64, 64] tanh, orthogonal, log std 0)
        "batch_size": 32,
        "n_steps": 512,
        "gamma": 0.99,
        "learning_rate": 5.05041e-05,
        "ent_coef": 0.000585045,
        "clip_range": 0.1,
        "n_epochs": 20,
        "gae_lambda": 0.95,
        "max_grad_norm": 1,
        "vf_coef": 0.871923,
    },
}
ZOO_SAC_MUJOCO = {"learning_starts": 10_000}
ZOO_TD3_MUJOCO = {
    "learning_starts": 10_000,
    "noise_type": "normal",
    "noise_std": 0.1,
    "train_freq": 1,
    "gradient_steps": 1,
    "learning_rate": 1e-3,
    "batch_size": 256,
    "policy_kwargs": {"net_arch": [400, 300]},
}
ZOO_DQN_ATARI = {
    "buffer_size": 100_000,
    "learning_rate": 1e-4,
    "batch_size": 32,
    "learning_starts": 100_000,
    "target_update_interval": 1000,
    "train_freq": 4,
    "gradient_steps": 1,
    "exploration_fraction": 0.1,
    "exploration_final_eps": 0.01,
    "optimize_memory_usage": False,
}
# SB3's defaults (2.x) that the entries above leave as they are.
SB3_PPO_DEFAULTS = {
    "n_envs": 1,
    "gamma": 0.99,
    "gae_lambda": 0.95,
    "max_grad_norm": 0.5,
    "ent_coef": 0.0,
    "vf_coef": 0.5,
    "policy_kwargs": {},
}
SB3_PPO_ADAM_EPS = 1e-5  # SB3's ActorCriticPolicy's Adam; its off-policy ones keep torch's 1e-8

# Published figures, read from the zoo's benchmark.md (one trained agent each, evaluated for
# ~150k steps; mean return; deterministic except Atari), not run here.
ZOO_FIGURES = {
    "ppo-hopper": ("Hopper-v3", "1M", 2410.4),
    "ppo-halfcheetah": ("HalfCheetah-v3", "1M", 5819.1),
    "ppo-walker2d": ("Walker2d-v3", "1M", 3478.8),
    "sac-hopper": ("Hopper-v3", "1M", 2325.5),
    "sac-halfcheetah": ("HalfCheetah-v3", "1M", 9535.5),
    "td3-hopper": ("Hopper-v3", "1M", 3606.4),
    "ppo-pong": ("PongNoFrameskip-v4", "10M", 20.989),
    "ppo-breakout": ("BreakoutNoFrameskip-v4", "10M", 398.0),
    "dqn-breakout": ("BreakoutNoFrameskip-v4", "10M", 358.3),
}

# Our Atari network for SB3's CnnPolicy (the Nature CNN: no padding; the presets' is rlpyt's).
NATURE_CNN = {
    "channels": [32, 64, 64],
    "kernel_sizes": [8, 4, 3],
    "strides": [4, 2, 1],
    "paddings": [0, 0, 0],
    "fc_sizes": 512,
}
# AtariEnv as SB3's AtariWrapper (see the module docstring).
ATARI_ENV_KWARGS = {"obs_size": (84, 84), "fire_on_reset": True}
SB3_ATARI_ENV_KWARGS = {"max_num_frames_per_episode": 4 * ATARI_HORIZON}


def schedule(value: float | str) -> tuple[float, bool]:
    """A zoo value ``2.5e-4`` or ``"lin_2.5e-4"`` as ``(start, annealed linearly to 0)``."""
    if isinstance(value, str) and value.startswith("lin_"):
        return float(value.removeprefix("lin_")), True
    return float(value), False


def ours_ppo(zoo: Mapping[str, Any]) -> list[str]:
    """Our ``--set`` overrides for the zoo's PPO entry ``zoo``."""
    z = {**SB3_PPO_DEFAULTS, **zoo}
    lr, lr_annealed = schedule(z["learning_rate"])
    clip, clip_annealed = schedule(z["clip_range"])
    if lr_annealed != clip_annealed:  # (ours anneals both or neither)
        raise ValueError("our PPO anneals the learning rate and the ratio clip together")
    batch = z["n_steps"] * z["n_envs"]
    return [
        f"sampler.batch_T={z['n_steps']}",
        f"sampler.batch_B={z['n_envs']}",
        f"algo_kwargs.discount={z['gamma']!r}",
        f"algo_kwargs.gae_lambda={z['gae_lambda']!r}",
        f"algo_kwargs.learning_rate={lr!r}",
        f"algo_kwargs.ratio_clip={clip!r}",
        f"algo_kwargs.linear_lr_schedule={lr_annealed}",
        f"algo_kwargs.epochs={z['n_epochs']}",
        f"algo_kwargs.minibatches={batch // z['batch_size']}",
        f"algo_kwargs.entropy_loss_coeff={z['ent_coef']!r}",
        # ours: coeff x mean(0.5 (v - R)^2); SB3: vf_coef x mean((v - R)^2)
        f"algo_kwargs.value_loss_coeff={2 * z['vf_coef']!r}",
        f"algo_kwargs.clip_grad_norm={float(z['max_grad_norm'])!r}",
        "algo_kwargs.normalize_advantage='minibatch'",  # SB3 standardises per minibatch
        f"algo_kwargs.optim_kwargs={{'eps': {SB3_PPO_ADAM_EPS!r}, 'fused': True}}",
    ]


def ours_ppo_mujoco_model(zoo: Mapping[str, Any]) -> list[str]:
    """Our Gaussian model for the zoo's ``policy_kwargs`` (SB3's MlpPolicy without them)."""
    net = zoo.get("policy_kwargs", {})
    hidden = net.get("net_arch", {"pi": [64, 64]})["pi"]
    model = {
        "hidden_sizes": hidden,
        "hidden_nonlinearity": net.get("activation_fn", "Tanh"),
        "mu_nonlinearity": None,  # SB3's mean is linear
        "init_log_std": float(net.get("log_std_init", 0.0)),
        "normalize_observation": True,  # the zoo's VecNormalize (norm_obs)
        "orthogonal_init": net.get("ortho_init", True),  # SB3's default: on
    }
    return [
        f"agent.model_kwargs={model!r}",
        "algo_kwargs.normalize_reward=True",  # the zoo's VecNormalize (norm_reward)
        "env_kwargs.clip_action=True",  # SB3 clips a Gaussian policy's actions
    ]


def ours_dqn(zoo: Mapping[str, Any], total: int, learning_starts: int) -> list[str]:
    """Our ``--set`` overrides for the zoo's DQN entry, on one environment as the zoo's, for a
    run of ``total`` steps learning from ``learning_starts``."""
    train_freq = zoo["train_freq"]
    # SB3's epsilon falls over exploration_fraction of the run, from its start, but SB3 acts
    # at random until learning starts; ours falls from the start of learning to eps_steps: a
    # schedule over when SB3's has ended by then is the same as one that ends there.
    eps_steps = max(int(zoo["exploration_fraction"] * total), learning_starts)
    return [
        "sampler.kind='serial'",
        "sampler.batch_B=1",
        f"sampler.batch_T={train_freq}",  # one iteration per training, as SB3's
        "sampler.max_decorrelation_steps=0",
        f"algo_kwargs.replay_size={zoo['buffer_size']}",
        f"algo_kwargs.learning_rate={zoo['learning_rate']!r}",
        f"algo_kwargs.batch_size={zoo['batch_size']}",
        f"algo_kwargs.replay_ratio={zoo['batch_size'] * zoo['gradient_steps'] / train_freq!r}",
        f"algo_kwargs.min_steps_learn={zoo['learning_starts']}",
        # SB3 counts env steps, ours updates (one per iteration of train_freq steps)
        f"algo_kwargs.target_update_interval={zoo['target_update_interval'] // train_freq}",
        f"algo_kwargs.eps_steps={eps_steps}",
        "algo_kwargs.n_step_return=1",
        "algo_kwargs.double_dqn=False",
        "algo_kwargs.delta_clip=1.0",  # SB3's smooth_l1_loss
        "algo_kwargs.clip_grad_norm=10.0",  # SB3's max_grad_norm
        "algo_kwargs.optim_kwargs={'eps': 1e-08, 'fused': True}",  # SB3: torch's default eps
        "agent_kwargs.eps_init=1.0",
        f"agent_kwargs.eps_final={zoo['exploration_final_eps']!r}",
        f"agent.model_kwargs={{'paddings': {NATURE_CNN['paddings']}}}",
    ]


# ------------------------------------------------------------------------------------ cases


@dataclass(frozen=True)
class Sb3Spec:
    """SB3's side of a case: the algorithm, the zoo's entry, and its environment wrappers."""

    algo: str  # PPO, SAC, TD3, DQN
    policy: str  # MlpPolicy, CnnPolicy
    zoo: Mapping[str, Any]  # the zoo's entry as written (n_envs, normalize ... included)
    zoo_entry: str  # where: "`Hopper-v4` of hyperparams/ppo.yml"
    atari: bool = False  # make_atari_env + VecFrameStack(4)
    normalize: bool = False  # VecNormalize (obs and reward, gamma the algorithm's)


@dataclass(frozen=True)
class Sizes:
    """How long a run is and how it is evaluated and checkpointed."""

    interval: int  # env steps between evaluations: a whole number of iterations
    evals: int  # evaluations after the one before training
    episodes: int  # per evaluation
    learning_starts: int | None  # off-policy: env steps before the first update
    replay: int | None  # off-policy: replay size
    sb3_checkpoint_evals: int  # SB3 checkpoints every this many evaluations

    @property
    def total(self) -> int:
        return self.interval * self.evals


@dataclass(frozen=True)
class Case:
    name: str
    title: str
    algo: str  # ours: ppo, sac, td3, dqn
    env: str  # ours
    sb3_env: str
    budget: int  # env steps the issue asks for (the run: a whole number of intervals near it)
    batch: int  # env steps per iteration, both sides
    evals: int
    episodes: int
    deterministic: bool
    seeds: tuple[int, int]  # default seeds: (ours, SB3)
    preset: str
    ours: tuple[str, ...]  # --set overrides (evaluation, sizes and threads are added)
    sb3: Sb3Spec
    notes: tuple[str, ...] = ()  # what differs between the sides, and why
    quick_interval: int = 0  # --quick: env steps between its 2 evaluations (default: batch)
    quick_episodes: int = 2

    @property
    def atari(self) -> bool:
        return self.sb3.atari

    @property
    def off_policy(self) -> bool:
        return self.algo in ("sac", "td3", "dqn")

    @property
    def max_episode_steps(self) -> int:
        return ATARI_HORIZON if self.atari else MUJOCO_MAX_STEPS

    def sizes(self, quick: bool) -> Sizes:
        if quick:
            interval = self.quick_interval or self.batch
            learning_starts = interval if self.off_policy else None
            replay = 5 * interval if self.off_policy else None
            return Sizes(interval, 2, self.quick_episodes, learning_starts, replay, 1)
        interval = max(1, round(self.budget / self.evals / self.batch)) * self.batch
        starts = self.sb3.zoo.get("learning_starts") if self.off_policy else None
        replay = self.sb3.zoo.get("buffer_size", 1_000_000) if self.off_policy else None
        every = max(1, self.evals // 10) if self.off_policy else 1
        return Sizes(interval, self.evals, self.episodes, starts, replay, every)

    def ours_overrides(self, sizes: Sizes, threads: int) -> list[str]:
        """Every ``--set`` of our run: the case's, then the run's sizes and evaluation."""
        overrides = list(self.ours)
        if self.algo == "dqn":
            overrides += ours_dqn(self.sb3.zoo, sizes.total, sizes.learning_starts or 0)
        if self.off_policy:
            overrides += [
                f"algo_kwargs.min_steps_learn={sizes.learning_starts}",
                f"algo_kwargs.replay_size={sizes.replay}",
                "runner.checkpoint_replay=True",
            ]
        return [
            *overrides,
            f"torch_threads={threads or None}",
            "runner.evaluate=True",
            f"runner.log_interval_steps={sizes.interval}",
            "runner.snapshot_mode='last'",
            "sampler.eval_n_envs=1",
            f"sampler.eval_max_trajectories={sizes.episodes}",
            f"sampler.eval_max_steps={sizes.episodes * self.max_episode_steps}",
            f"agent.deterministic_eval={self.deterministic}",
        ]


def _ppo_mujoco(task: str) -> Case:
    zoo = ZOO_PPO_MUJOCO[task]
    notes = [
        "Normalisation as the zoo's VecNormalize: observations standardised on both sides "
        "(ours `normalize_observation`, statistics updated once per batch; SB3's per step), "
        "rewards divided by the running deviation of the discounted return and clipped at 10 "
        "(ours `normalize_reward`, also once per batch).",
    ]
    return Case(
        name=f"ppo-{task.lower()}",
        title=f"PPO on {task}-v5",
        algo="ppo",
        env=f"{task}-v5",
        sb3_env=f"{task}-v5",
        budget=1_000_000,
        batch=zoo["n_steps"],
        evals=50,
        episodes=10,
        deterministic=True,
        seeds=(3, 2),
        preset="ppo-mujoco",
        ours=(*ours_ppo(zoo), *ours_ppo_mujoco_model(zoo)),
        sb3=Sb3Spec(
            "PPO",
            "MlpPolicy",
            {"normalize": True, "n_envs": 1, **zoo},
            f"`{task}-v4` of hyperparams/ppo.yml",
            normalize=True,
        ),
        notes=tuple(notes),
    )


_QPG_NOTES = (
    "Before learning starts both sides act uniformly at random over the action box (ours "
    "`agent_kwargs.pretrain_std='uniform'`; the presets' default is rlpyt's Gaussian noise "
    "around the untrained policy).",
    "The zoo's budget is 1M steps; 200k is what this CPU allows (the zoo's figure is at 1M).",
)


_UNIFORM_WARM_UP = "agent_kwargs.pretrain_std='uniform'"  # SB3's actions before learning


def _sac(task: str) -> Case:
    return Case(
        name=f"sac-{task.lower()}",
        title=f"SAC on {task}-v5",
        algo="sac",
        env=f"{task}-v5",
        sb3_env=f"{task}-v5",
        budget=200_000,
        batch=1,
        evals=50,
        episodes=10,
        deterministic=True,
        seeds=(2, 1),
        # the preset holds SB3's SAC defaults: batch 256, one update per step, lr 3e-4,
        # tau 0.005, [256, 256], learned temperature aiming at -|A|, replay 1M, from 10k steps
        preset="mujoco-sac",
        ours=(_UNIFORM_WARM_UP,),
        sb3=Sb3Spec("SAC", "MlpPolicy", ZOO_SAC_MUJOCO, f"`{task}-v4` of hyperparams/sac.yml"),
        notes=_QPG_NOTES,
        quick_interval=500,
    )


def _td3(task: str) -> Case:
    return Case(
        name=f"td3-{task.lower()}",
        title=f"TD3 on {task}-v5",
        algo="td3",
        env=f"{task}-v5",
        sb3_env=f"{task}-v5",
        budget=200_000,
        batch=1,
        evals=50,
        episodes=10,
        deterministic=True,
        seeds=(2, 1),
        # the preset's lr 1e-3 (both), [400, 300], policy and targets every 2nd update, tau
        # 0.005, target noise 0.2 clipped at 0.5, exploration noise 0.1; the zoo's batches of 256
        preset="mujoco-td3",
        ours=("algo_kwargs.batch_size=256", "algo_kwargs.replay_ratio=256", _UNIFORM_WARM_UP),
        sb3=Sb3Spec("TD3", "MlpPolicy", ZOO_TD3_MUJOCO, f"`{task}-v4` of hyperparams/td3.yml"),
        notes=(
            *_QPG_NOTES,
            "The zoo's figure for Hopper-v3 was trained with the zoo's TD3 settings of then (lr "
            "3e-4, SB3's TD3 defaults of then); the settings here are the zoo's since v2.3.",
        ),
        quick_interval=500,
    )


def _atari_ppo(game: str) -> Case:
    return Case(
        name=f"ppo-{game.lower()}",
        title=f"PPO on {game}",
        algo="ppo",
        env=f"atari:{game.lower()}",
        sb3_env=f"{game}NoFrameskip-v4",
        budget=2_000_000,
        batch=ZOO_PPO_ATARI["n_envs"] * ZOO_PPO_ATARI["n_steps"],
        evals=25,
        episodes=5,
        deterministic=False,
        seeds=(2, 1),
        # our sampler of choice: the preset's parallel CPU workers (one per core); SB3 the
        # zoo's DummyVecEnv (the envs stepped in its process)
        preset="atari",
        ours=(
            f"env_kwargs={ATARI_ENV_KWARGS!r}",
            "sampler.kind='cpu'",
            "sampler.max_decorrelation_steps=0",
            *ours_ppo(ZOO_PPO_ATARI),
            # SB3's CnnPolicy: the Nature CNN shared by policy and value, ortho_init
            f"agent.model_kwargs={ {**NATURE_CNN, 'orthogonal_init': True}!r}",
        ),
        sb3=Sb3Spec(
            "PPO", "CnnPolicy", ZOO_PPO_ATARI, "`atari` of hyperparams/ppo.yml", atari=True
        ),
        notes=("The zoo's budget is 10M steps (its figure); 2M is what this CPU allows.",),
        quick_episodes=1,
    )


def _atari_dqn(game: str) -> Case:
    return Case(
        name=f"dqn-{game.lower()}",
        title=f"DQN on {game}",
        algo="dqn",
        env=f"atari:{game.lower()}",
        sb3_env=f"{game}NoFrameskip-v4",
        budget=1_000_000,
        batch=ZOO_DQN_ATARI["train_freq"],
        evals=25,
        episodes=5,
        deterministic=True,
        seeds=(1, 1),
        preset="atari-dqn",
        ours=(f"env_kwargs={ATARI_ENV_KWARGS!r}",),  # (+ ours_dqn, sized to the run)
        sb3=Sb3Spec(
            "DQN", "CnnPolicy", ZOO_DQN_ATARI, "`atari` of hyperparams/dqn.yml", atari=True
        ),
        notes=(
            "Exploration: the zoo's exploration_fraction 0.1 of a 1M run ends where learning "
            "starts (100k): both sides act at random for 100k steps, then with epsilon 0.01 "
            "(the zoo's 10M run behind its figure explored over 1M steps).",
            "Evaluation is greedy on both sides (the zoo's uses its current epsilon).",
            "SB3 stores whole stacked observations twice (optimize_memory_usage=False, the "
            "zoo's); ours each frame once (frame buffer): the same transitions.",
            "The zoo's budget is 10M steps (its figure); 1M is what this CPU allows.",
        ),
        quick_interval=1000,
        quick_episodes=1,
    )


CASES: dict[str, Case] = {
    case.name: case
    for case in (
        _ppo_mujoco("Hopper"),
        _ppo_mujoco("HalfCheetah"),
        _ppo_mujoco("Walker2d"),
        _sac("Hopper"),
        _sac("HalfCheetah"),
        _td3("Hopper"),
        _atari_ppo("Pong"),
        _atari_ppo("Breakout"),
        _atari_dqn("Breakout"),
    )
}


# ------------------------------------------------------------------------- run directories


@dataclass(frozen=True)
class RunPaths:
    """Where one run (case, library, seed) keeps its files."""

    results: Path
    case: str
    lib: str
    seed: int

    @property
    def dir(self) -> Path:
        return self.results / self.case / self.lib / f"seed_{self.seed}"

    @property
    def work(self) -> Path:  # not committed
        return self.dir / "work"

    @property
    def curve(self) -> Path:
        return self.dir / "curve.csv"

    @property
    def record(self) -> Path:
        return self.dir / "run.json"

    @property
    def attempts(self) -> Path:
        return self.work / "attempts.json"

    @property
    def our_run_dir(self) -> Path:  # rl-suite's run directory: <log dir>/run_<seed>
        return self.work / f"run_{self.seed}"

    @property
    def sb3_state(self) -> Path:
        return self.work / "state.json"


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole: a temporary file, flushed, then renamed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None


@contextlib.contextmanager
def run_lock(paths: RunPaths) -> Iterator[bool]:
    """Hold the run's lock for the block; yields False (holding nothing) when another process
    has it (that run is in progress)."""
    paths.work.mkdir(parents=True, exist_ok=True)
    with open(paths.work / ".lock", "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def is_locked(paths: RunPaths) -> bool:
    if not (paths.work / ".lock").exists():
        return False
    with run_lock(paths) as got:
        return not got


# ------------------------------------------------------------------------- machine, commit


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    return platform.processor() or platform.machine()


def versions() -> dict[str, str]:
    names = "torch numpy gymnasium mujoco ale-py stable-baselines3 rl-suite rl-arrays rl-replay"
    names += " rl-samplers rl-agents rl-algos rl-runners"
    found = {}
    for name in names.split():
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            found[name] = importlib.metadata.version(name)
    return {"python": platform.python_version(), **found}


def git(*args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def machine() -> dict[str, Any]:
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "platform": platform.platform(),
        "versions": versions(),
    }


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# ---------------------------------------------------------------------------- our side


def our_progress(paths: RunPaths) -> list[dict[str, str]]:
    try:
        with open(paths.our_run_dir / "progress.csv", newline="", encoding="utf-8") as f:
            return list(csv.DictReader(f))
    except FileNotFoundError:
        return []


def our_steps(paths: RunPaths) -> int:
    rows = our_progress(paths)
    return int(float(rows[-1]["CumSteps"])) if rows else 0


def our_command(case: Case, paths: RunPaths, sizes: Sizes, threads: int) -> list[str]:
    """Train or, when the run has a checkpoint, resume."""
    run_dir = paths.our_run_dir
    if (run_dir / "params.json").exists() and any(run_dir.glob("*.pt")):
        return [sys.executable, "-m", "rl_suite", "resume", str(run_dir)]
    command = [sys.executable, "-m", "rl_suite", "train", case.algo, "--preset", case.preset]
    command += ["--env", case.env, "--steps", str(sizes.total), "--seed", str(paths.seed)]
    command += ["--log-dir", str(paths.work)]
    for override in case.ours_overrides(sizes, threads):
        command += ["--set", override]
    return command


def our_curve(case: Case, paths: RunPaths) -> tuple[list[list[float]], dict[str, float]]:
    """The evaluation rows of our ``progress.csv`` as ``[steps, mean, std, episodes]``, and
    the timing of the last row."""
    column = "GameScore" if case.atari else "Return"
    curve: dict[int, list[float]] = {}
    rows = our_progress(paths)
    for row in rows:
        mean = float(row.get(f"{column}Average") or "nan")
        episodes = int(float(row.get("TrajsInEval") or 0))
        if episodes > 0 and math.isfinite(mean):
            steps = int(float(row["CumSteps"]))
            curve[steps] = [steps, mean, float(row[f"{column}Std"]), episodes]
    timing = {}
    if rows:
        last = rows[-1]
        timing = {
            "env_steps": int(float(last["CumSteps"])),
            "train_s": float(last["CumTrainTime"]),
            "runner_s": float(last["CumTime (s)"]),
        }
    return [curve[steps] for steps in sorted(curve)], timing


# ---------------------------------------------------------------------------- SB3's side


def sb3_available() -> bool:
    try:
        importlib.metadata.version("stable-baselines3")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def sb3_envs(case: Case, seed: int, n_envs: int, evaluation: bool) -> Any:
    """The zoo's environments for SB3: ``make_vec_env`` (``Monitor`` inside), Atari through
    ``make_atari_env`` (``Monitor`` then ``AtariWrapper``) and ``VecFrameStack(4)``; with
    ``normalize``, ``VecNormalize`` (evaluation: statistics frozen, rewards raw)."""
    from stable_baselines3.common.env_util import make_atari_env, make_vec_env
    from stable_baselines3.common.vec_env import VecFrameStack, VecNormalize

    if case.atari:
        import ale_py
        import gymnasium

        gymnasium.register_envs(ale_py)
        env = make_atari_env(case.sb3_env, n_envs, seed=seed, env_kwargs=SB3_ATARI_ENV_KWARGS)
        return VecFrameStack(env, n_stack=4)
    env = make_vec_env(case.sb3_env, n_envs, seed=seed)
    if case.sb3.normalize:
        gamma = {**SB3_PPO_DEFAULTS, **case.sb3.zoo}["gamma"]
        if evaluation:
            return VecNormalize(env, training=False, norm_reward=False, gamma=gamma)
        return VecNormalize(env, gamma=gamma)  # (norm_obs, norm_reward, clipped at 10)
    return env


def sb3_model(case: Case, sizes: Sizes, env: Any, seed: int) -> Any:
    """SB3's algorithm with the zoo's entry (schedules and networks as the zoo builds them)."""
    import numpy as np
    import stable_baselines3
    import torch
    from stable_baselines3.common.noise import NormalActionNoise

    kwargs = dict(case.sb3.zoo)
    for key in ("n_envs", "normalize", "n_timesteps", "policy", "noise_type", "noise_std"):
        kwargs.pop(key, None)
    for key in ("learning_rate", "clip_range"):
        if key in kwargs:
            start, annealed = schedule(kwargs[key])
            kwargs[key] = (lambda p, s=start: p * s) if annealed else start
    policy_kwargs = dict(kwargs.pop("policy_kwargs", {}))
    if "activation_fn" in policy_kwargs:
        policy_kwargs["activation_fn"] = getattr(torch.nn, policy_kwargs["activation_fn"])
    if sizes.learning_starts is not None:
        kwargs["learning_starts"] = sizes.learning_starts
        kwargs["buffer_size"] = sizes.replay
    if case.sb3.zoo.get("noise_type") == "normal":
        n_actions = env.action_space.shape[0]
        sigma = case.sb3.zoo["noise_std"] * np.ones(n_actions)
        kwargs["action_noise"] = NormalActionNoise(np.zeros(n_actions), sigma)
    AlgoCls = getattr(stable_baselines3, case.sb3.algo)
    return AlgoCls(
        case.sb3.policy,
        env,
        policy_kwargs=policy_kwargs or None,
        seed=seed,
        device="cpu",
        verbose=0,
        **kwargs,
    )


# SB3 counters a checkpoint keeps (the others are rebuilt from them).
SB3_COUNTERS = ("num_timesteps", "_n_updates", "_n_calls", "_episode_num")


class Sb3Checkpoints:
    """SB3 checkpoints in ``work``: ``ckpt_<steps>/`` (``params.pt``: parameters and optimizers
    as tensors; ``vecnormalize.npz``; ``replay/*.npy``), made under a temporary name and
    renamed whole, then named in ``state.json`` (replaced atomically), which also holds the
    curve and the times so far. Nothing is unpickled: ``torch.load(weights_only=True)``,
    ``np.load(allow_pickle=False)``, JSON."""

    def __init__(self, work: Path):
        self.work = work
        self.state_path = work / "state.json"

    def state(self) -> dict[str, Any]:
        state = read_json(self.state_path)
        return state or {"checkpoint": None, "curve": [], "train_s": 0.0, "finished": False}

    def clean(self) -> None:
        """Remove what a killed writer left: unfinished and unnamed checkpoints."""
        named = self.state()["checkpoint"]
        for path in self.work.glob("ckpt_*"):
            if path.name != named:
                shutil.rmtree(path, ignore_errors=True)

    def save(self, model: Any, state: dict[str, Any], replay: bool) -> None:
        import numpy as np
        import torch
        from stable_baselines3.common.vec_env import VecNormalize

        name = f"ckpt_{model.num_timesteps}"
        tmp = self.work / f"{name}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        extra = {}
        if getattr(model, "log_ent_coef", None) is not None:  # SAC's learned temperature
            extra["log_ent_coef"] = model.log_ent_coef.detach().clone()
        params = {"parameters": model.get_parameters(), "extra": extra}
        params["counters"] = {key: int(getattr(model, key, 0)) for key in SB3_COUNTERS}
        torch.save(params, tmp / "params.pt")
        env = model.get_env()
        if isinstance(env, VecNormalize):
            np.savez(
                tmp / "vecnormalize.npz",
                obs_mean=env.obs_rms.mean,
                obs_var=env.obs_rms.var,
                obs_count=env.obs_rms.count,
                ret_mean=env.ret_rms.mean,
                ret_var=env.ret_rms.var,
                ret_count=env.ret_rms.count,
            )
        buffer = getattr(model, "replay_buffer", None)
        if replay and buffer is not None:
            (tmp / "replay").mkdir()
            size = buffer.buffer_size if buffer.full else buffer.pos
            for key in ("observations", "next_observations", "actions", "rewards", "dones"):
                array = getattr(buffer, key, None)
                if array is not None:
                    np.save(tmp / "replay" / f"{key}.npy", array[:size])
            if getattr(buffer, "timeouts", None) is not None:
                np.save(tmp / "replay" / "timeouts.npy", buffer.timeouts[:size])
            meta = {"pos": int(buffer.pos), "full": bool(buffer.full)}
            (tmp / "replay" / "meta.json").write_text(json.dumps(meta))
        for path in tmp.rglob("*"):
            if path.is_file():
                with open(path, "rb") as f:
                    os.fsync(f.fileno())
        final = self.work / name
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        write_atomic(self.state_path, json.dumps({**state, "checkpoint": name}))
        self.clean()

    def load(self, model: Any, state: dict[str, Any]) -> None:
        import numpy as np
        import torch
        from stable_baselines3.common.vec_env import VecNormalize

        ckpt = self.work / state["checkpoint"]
        saved = torch.load(ckpt / "params.pt", map_location="cpu", weights_only=True)
        model.set_parameters(saved["parameters"], exact_match=True)
        if "log_ent_coef" in saved["extra"]:
            with torch.no_grad():
                model.log_ent_coef.copy_(saved["extra"]["log_ent_coef"])
        for key, value in saved["counters"].items():
            if hasattr(model, key):
                setattr(model, key, value)
        env = model.get_env()
        if isinstance(env, VecNormalize):
            with np.load(ckpt / "vecnormalize.npz", allow_pickle=False) as stats:
                env.obs_rms.mean, env.obs_rms.var = stats["obs_mean"], stats["obs_var"]
                env.obs_rms.count = float(stats["obs_count"])
                env.ret_rms.mean, env.ret_rms.var = stats["ret_mean"], stats["ret_var"]
                env.ret_rms.count = float(stats["ret_count"])
        buffer = getattr(model, "replay_buffer", None)
        if buffer is not None and (ckpt / "replay").is_dir():
            meta = json.loads((ckpt / "replay" / "meta.json").read_text())
            for path in (ckpt / "replay").glob("*.npy"):
                array = np.load(path, mmap_mode="r", allow_pickle=False)
                getattr(buffer, path.stem)[: len(array)] = array
            buffer.pos, buffer.full = meta["pos"], meta["full"]


def sb3_evaluate(model: Any, eval_env: Any, case: Case, sizes: Sizes, seed: int) -> list[float]:
    """``sizes.episodes`` whole episodes on ``eval_env`` (one environment), their returns."""
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import VecNormalize

    train_env = model.get_env()
    if isinstance(train_env, VecNormalize):
        eval_env.obs_rms = train_env.obs_rms.copy()
    eval_env.seed(seed)
    returns, _ = evaluate_policy(
        model,
        eval_env,
        n_eval_episodes=sizes.episodes,
        deterministic=case.deterministic,
        return_episode_rewards=True,
    )
    return [float(r) for r in returns]


_STOP_REQUESTED: list[str] = []


def _request_stop(signum: int, _frame: Any) -> None:
    _STOP_REQUESTED.append(signal.Signals(signum).name)


def sb3_child(case_name: str, seed: int, work: Path, quick: bool, threads: int) -> int:
    """Train SB3's side of a run from its last checkpoint (or from scratch) to its end; one
    process at a time in ``work``."""
    with open(work / ".sb3.lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"{work} is in use by another process", file=sys.stderr)
            return 1
        return sb3_train(CASES[case_name], seed, work, quick, threads)


def sb3_train(case: Case, seed: int, work: Path, quick: bool, threads: int) -> int:
    import torch

    if threads:
        torch.set_num_threads(threads)
    from stable_baselines3.common.callbacks import BaseCallback

    sizes = case.sizes(quick)
    checkpoints = Sb3Checkpoints(work)
    checkpoints.clean()
    state = checkpoints.state()
    if state["finished"]:
        print("finished already")
        return 0
    attempt = len(read_json(work / "attempts.json") or [1]) - 1
    env = sb3_envs(case, seed, case.sb3.zoo.get("n_envs", 1), evaluation=False)
    # A continued run draws new random streams (its environments restart anyway).
    model = sb3_model(case, sizes, env, seed + 10_000 * attempt)
    if state["checkpoint"] is not None:
        checkpoints.load(model, state)
        print(f"continuing from {state['checkpoint']} ({model.num_timesteps} steps)", flush=True)
    eval_env = sb3_envs(case, seed, 1, evaluation=True)
    learning_starts = sizes.learning_starts or 0

    class Suite(BaseCallback):
        """Evaluates and checkpoints between trainings (at each rollout's start, as ours
        after an iteration's update) and at the end; stops on SIGTERM / SIGINT."""

        def _on_training_start(self) -> None:
            self.start = time.perf_counter()
            self.eval_s = 0.0
            self.stopping = False

        def train_s(self) -> float:
            return state["train_s"] + time.perf_counter() - self.start - self.eval_s

        def maybe_evaluate(self) -> None:
            steps = self.model.num_timesteps
            if steps % sizes.interval or 0 < steps < learning_starts:
                return
            if state["curve"] and state["curve"][-1][0] >= steps:  # (evaluated before a stop)
                return
            start = time.perf_counter()
            index = steps // sizes.interval
            returns = sb3_evaluate(
                self.model, eval_env, case, sizes, 1_000_000 + 1000 * seed + index
            )
            self.eval_s += time.perf_counter() - start
            mean, std = float(sum(returns) / len(returns)), float(_std(returns))
            state["curve"].append([steps, mean, std, len(returns)])
            print(
                f"steps {steps:,}: evaluation return {mean:.1f} ({len(returns)} episodes), "
                f"{steps / max(self.train_s(), 1e-9):.0f} steps/s",
                flush=True,
            )

        def maybe_checkpoint(self, final: bool = False) -> None:
            steps = self.model.num_timesteps
            every = sizes.interval * sizes.sb3_checkpoint_evals
            if final or _STOP_REQUESTED or (steps % every == 0 and steps > 0):
                checkpoints.save(
                    self.model,
                    {**state, "train_s": self.train_s(), "env_steps": steps, "finished": final},
                    replay=not final,
                )

        def _on_rollout_start(self) -> None:
            if self.stopping:
                return
            self.maybe_evaluate()
            self.maybe_checkpoint()
            if _STOP_REQUESTED:
                print(f"stopped by {_STOP_REQUESTED[0]} at {self.model.num_timesteps:,} steps")
                self.stopping = True

        def _on_step(self) -> bool:
            return not self.stopping

    signal.signal(signal.SIGTERM, _request_stop)
    signal.signal(signal.SIGINT, _request_stop)
    callback = Suite()
    remaining = sizes.total - model.num_timesteps
    model.learn(total_timesteps=remaining, callback=callback, reset_num_timesteps=False)
    if callback.stopping or model.num_timesteps < sizes.total:
        return EXIT_STOPPED
    callback.maybe_evaluate()
    callback.maybe_checkpoint(final=True)
    env.close()
    eval_env.close()
    return 0


def _std(values: Sequence[float]) -> float:
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


def sb3_curve(paths: RunPaths) -> tuple[list[list[float]], dict[str, float]]:
    state = read_json(paths.sb3_state) or {}
    timing = {}
    if state.get("checkpoint"):
        timing = {"env_steps": int(state["env_steps"]), "train_s": float(state["train_s"])}
    return sorted(state.get("curve", [])), timing


def sb3_command(case: Case, paths: RunPaths, quick: bool, threads: int) -> list[str]:
    command = [sys.executable, str(Path(__file__).resolve()), "_sb3", case.name]
    command += [str(paths.seed), str(paths.work), f"--threads={threads}"]
    return [*command, "--quick"] if quick else command


def sb3_steps(paths: RunPaths) -> int:
    return int((read_json(paths.sb3_state) or {}).get("env_steps", 0))


# ------------------------------------------------------------------------------ one run


@dataclass
class Outcome:
    paths: RunPaths
    status: str  # done, stopped, failed, skipped (in progress elsewhere)
    detail: str = ""


def finished(case: Case, paths: RunPaths, quick: bool) -> bool:
    """Whether the run trained its whole budget (its results may still need writing)."""
    total = case.sizes(quick).total
    if paths.lib == "ours":
        return our_steps(paths) >= total
    return bool((read_json(paths.sb3_state) or {}).get("finished"))


def run_one(case: Case, paths: RunPaths, quick: bool, threads: int, echo: bool) -> Outcome:
    """Train (or continue) one run to its end and write its results; a finished one only has
    its results written (again, if missing)."""
    with run_lock(paths) as got:
        if not got:
            return Outcome(paths, "skipped", "in progress in another process")
        record = read_json(paths.record)
        if record and record.get("finished"):
            return Outcome(paths, "done", "finished before")
        sizes = case.sizes(quick)
        attempts = read_json(paths.attempts) or []
        if attempts and "end" not in attempts[-1]:  # (its runner was killed: last activity)
            newest = max((p.stat().st_mtime for p in paths.work.rglob("*")), default=time.time())
            attempts[-1]["end"] = datetime.fromtimestamp(newest, timezone.utc).isoformat()
            attempts[-1]["wall_s"] = newest - attempts[-1]["start_unix"]
            attempts[-1]["exit"] = "killed"
        if not finished(case, paths, quick):
            if paths.lib == "ours":
                command = our_command(case, paths, sizes, threads)
            else:
                command = sb3_command(case, paths, quick, threads)
            attempt = {
                "start": now(),
                "start_unix": time.time(),
                "command": shlex.join(command),
                "commit": git("rev-parse", "HEAD"),
                "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
                "machine": machine(),
            }
            attempts.append(attempt)
            write_atomic(paths.attempts, json.dumps(attempts, indent=1))
            log = paths.work / f"attempt_{len(attempts)}.log"
            code = run_child(
                command, paths.work, log, echo, f"{case.name} {paths.lib} {paths.seed}"
            )
            attempt.update(end=now(), wall_s=time.time() - attempt["start_unix"], exit=code)
            write_atomic(paths.attempts, json.dumps(attempts, indent=1))
            if code == EXIT_STOPPED or code == 130 or code < 0:
                return Outcome(paths, "stopped", f"exit {code}; `run` again continues it")
            if code != 0 or not finished(case, paths, quick):
                tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
                return Outcome(paths, "failed", f"exit {code}, log {log}:\n{tail}")
        write_results(case, paths, sizes, attempts, quick)
        return Outcome(paths, "done", f"results in {paths.dir}")


_CHILD: list[subprocess.Popen] = []


def run_child(command: list[str], cwd: Path, log: Path, echo: bool, label: str) -> int:
    """Run ``command`` in ``cwd``, its output into ``log`` (and, with ``echo``, the console).
    It runs in its own session: a Ctrl-C or SIGTERM here reaches it as one SIGTERM (both
    libraries' runs checkpoint and exit on it; a Ctrl-C would stop ours without one)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with open(log, "w", encoding="utf-8") as out:
        child = subprocess.Popen(
            command,
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            start_new_session=True,
        )
        _CHILD.append(child)
        try:
            assert child.stdout is not None
            for line in child.stdout:
                out.write(line)
                out.flush()
                if echo:
                    print(f"[{label}] {line}", end="", flush=True)
            return child.wait()
        finally:
            _CHILD.remove(child)


def _forward_signal(signum: int, _frame: Any) -> None:
    _STOP_REQUESTED.append(signal.Signals(signum).name)
    for child in _CHILD:
        with contextlib.suppress(OSError):
            child.send_signal(signal.SIGTERM)


def write_results(
    case: Case, paths: RunPaths, sizes: Sizes, attempts: list[dict[str, Any]], quick: bool
) -> None:
    """``curve.csv`` and ``run.json`` of a finished run."""
    curve, timing = our_curve(case, paths) if paths.lib == "ours" else sb3_curve(paths)
    with open(paths.curve.with_suffix(".tmp"), "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["env_steps", "mean_return", "std_return", "episodes"])
        for steps, mean, std, episodes in curve:
            writer.writerow([int(steps), f"{mean:.6g}", f"{std:.6g}", int(episodes)])
    os.replace(paths.curve.with_suffix(".tmp"), paths.curve)
    last = attempts[-1] if attempts else {}
    record = {
        "case": case.name,
        "title": case.title,
        "library": LIB_NAMES[paths.lib],
        "seed": paths.seed,
        "finished": True,
        "quick": quick,
        "env": case.env if paths.lib == "ours" else case.sb3_env,
        "env_steps": timing.get("env_steps"),
        "evaluations": len(curve),
        "episodes_per_evaluation": sizes.episodes,
        "deterministic_evaluation": case.deterministic,
        "final_return": final_return([row[1] for row in curve], case.evals),
        "train_s": timing.get("train_s"),
        "steps_per_s": timing["env_steps"] / timing["train_s"] if timing.get("train_s") else None,
        "wall_s": sum(a.get("wall_s", 0.0) for a in attempts),
        "command": attempts[0]["command"] if attempts else None,
        "commit": last.get("commit"),
        "dirty": last.get("dirty"),
        "machine": last.get("machine"),
        "attempts": [{k: v for k, v in a.items() if k != "start_unix"} for a in attempts],
    }
    write_atomic(paths.record, json.dumps(record, indent=1) + "\n")


def final_return(means: Sequence[float], evals: int) -> float | None:
    """The average of the last 10% of the evaluations (at least one)."""
    if not means:
        return None
    last = max(1, math.ceil(0.1 * min(evals, len(means))))
    return float(sum(means[-last:]) / last)


# ------------------------------------------------------------------------ status, report


def default_seeds(case: Case, lib: str, quick: bool) -> range:
    """The case's seeds for ``lib`` (``--quick``: seed 0 alone)."""
    return range(1 if quick else case.seeds[LIBS.index(lib)])


def run_paths(
    results: Path, case: Case, libs: Sequence[str], seeds: Sequence[int] | None, quick: bool
) -> Iterator[RunPaths]:
    for lib in libs:
        for seed in default_seeds(case, lib, quick) if seeds is None else seeds:
            yield RunPaths(results, case.name, lib, seed)


def run_state(case: Case, paths: RunPaths, quick: bool) -> tuple[str, int]:
    """``(state, env steps so far)``: done, running, stopped (a checkpoint to continue from),
    missing."""
    record = read_json(paths.record)
    if record and record.get("finished"):
        return "done", int(record.get("env_steps") or 0)
    steps = our_steps(paths) if paths.lib == "ours" else sb3_steps(paths)
    if paths.work.exists() and is_locked(paths):
        return "running", steps
    if steps or (paths.work.exists() and any(paths.work.iterdir())):
        return "stopped", steps
    return "missing", 0


def status(results: Path, quick: bool) -> str:
    lines = [f"{'case':<16} {'library':<8} {'seed':>4}  {'state':<8} {'env steps':>21}"]
    for case in CASES.values():
        total = case.sizes(quick).total
        for lib in LIBS:
            names = [
                p.name.removeprefix("seed_") for p in (results / case.name / lib).glob("seed_*")
            ]
            found = {int(name) for name in names if name.isdigit()}
            for seed in sorted(found | set(default_seeds(case, lib, quick))):
                paths = RunPaths(results, case.name, lib, seed)
                state, steps = run_state(case, paths, quick)
                progress = f"{steps:,} / {total:,}"
                lines.append(f"{case.name:<16} {lib:<8} {seed:>4}  {state:<8} {progress:>21}")
    return "\n".join(lines)


@dataclass
class Side:
    """One library's finished runs of a case."""

    records: list[dict[str, Any]] = field(default_factory=list)
    curves: list[list[list[float]]] = field(default_factory=list)

    def finals(self) -> list[float]:
        return [r["final_return"] for r in self.records if r.get("final_return") is not None]

    def mean_of(self, key: str) -> float | None:
        values = [r[key] for r in self.records if r.get(key) is not None]
        return sum(values) / len(values) if values else None


def read_side(results: Path, case: Case, lib: str) -> Side:
    side = Side()
    for seed_dir in sorted((results / case.name / lib).glob("seed_*")):
        record = read_json(seed_dir / "run.json")
        if not (record and record.get("finished")):
            continue
        with open(seed_dir / "curve.csv", newline="", encoding="utf-8") as f:
            rows = [[float(x) for x in row] for row in list(csv.reader(f))[1:]]
        side.records.append(record)
        side.curves.append(rows)
    return side


def plot_case(case: Case, sides: Mapping[str, Side], out: Path, quick: bool) -> bool:
    """One picture: each library's mean curve over its seeds, with a min-max band; the zoo's
    figure as a line when it is at this budget."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(7, 4.2))
    colors = {"ours": "tab:blue", "sb3": "tab:orange"}
    for lib, side in sides.items():
        if not side.curves:
            continue
        by_step: dict[float, list[float]] = {}
        for curve in side.curves:
            for steps, mean, *_ in curve:
                by_step.setdefault(steps, []).append(mean)
        n = len(side.curves)
        steps = sorted(s for s, values in by_step.items() if len(values) == n)
        if not steps:
            continue
        mean = [sum(by_step[s]) / n for s in steps]
        label = f"{LIB_NAMES[lib]} ({n} seed{'s' * (n > 1)}: mean, min-max)"
        ax.plot(steps, mean, color=colors[lib], label=label)
        low = [min(by_step[s]) for s in steps]
        high = [max(by_step[s]) for s in steps]
        ax.fill_between(steps, low, high, color=colors[lib], alpha=0.2, linewidth=0)
    figure = ZOO_FIGURES.get(case.name)
    if figure is not None and figure[1] == f"{case.budget // 1_000_000}M" and not quick:
        label = f"zoo's figure, {figure[0]} at {figure[1]} (read, not run here)"
        ax.axhline(figure[2], color="gray", linestyle=":", label=label)
    episodes = {r.get("episodes_per_evaluation") for side in sides.values() for r in side.records}
    kind = "game score" if case.atari else "return"
    if not case.deterministic:
        how = "sampled actions"
    else:
        how = "greedy" if case.algo == "dqn" else "deterministic"
    ax.set_xlabel("environment steps")
    count = "/".join(str(n) for n in sorted(n for n in episodes if n)) or case.episodes
    unit = "games" if case.atari else "episodes"
    ax.set_ylabel(f"evaluation {kind}\n(mean of {count} {unit}, {how})")
    ax.set_title(f"{case.title}: rl-suite and Stable-Baselines3, zoo settings")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return True


def _mean_std(values: Sequence[float]) -> str:
    if not values:
        return "not run"
    mean = sum(values) / len(values)
    if len(values) == 1:
        return f"{mean:,.1f} (1 seed)"
    return f"{mean:,.1f} ± {_std(values):,.1f} ({len(values)} seeds)"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds / 60:.1f} min" if seconds < 3600 else f"{seconds / 3600:.1f} h"


def case_row(case: Case, sides: Mapping[str, Side], quick: bool) -> str:
    ours, sb3 = sides["ours"], sides["sb3"]
    zoo = ZOO_FIGURES.get(case.name)
    our_rate, sb3_rate = ours.mean_of("steps_per_s"), sb3.mean_of("steps_per_s")
    cells = [
        case.name,
        f"{case.sizes(quick).total:,}",
        _mean_std(ours.finals()),
        _mean_std(sb3.finals()),
        f"{zoo[2]:,.1f} ({zoo[0]}, {zoo[1]})" if zoo else "-",
        _rate(our_rate),
        _rate(sb3_rate),
        f"{our_rate / sb3_rate:.2f}" if our_rate and sb3_rate else "-",
        _duration(ours.mean_of("wall_s")),
        _duration(sb3.mean_of("wall_s")),
    ]
    return "| " + " | ".join(cells) + " |"


def case_section(
    results: Path, case: Case, sides: Mapping[str, Side], drawn: bool, quick: bool
) -> str:
    lines = [f"### {case.name}: {case.title}", ""]
    seeds = {lib: sorted(r["seed"] for r in side.records) for lib, side in sides.items()}
    unfinished = []
    for paths in run_paths(results, case, LIBS, None, quick):
        state, steps = run_state(case, paths, quick)
        if state in ("running", "stopped"):
            unfinished.append(f"{LIB_NAMES[paths.lib]} seed {paths.seed} {state} at {steps:,}")
    if seeds["ours"] or seeds["sb3"]:
        wanted = "" if quick else f" (the case asks for {case.seeds[0]} and {case.seeds[1]})"
        finished_runs = f"rl-suite {seeds['ours'] or 'none'}, SB3 {seeds['sb3'] or 'none'}"
        lines += [f"Finished seeds: {finished_runs}{wanted}.", ""]
    else:
        lines += ["No finished run yet.", ""]
    if unfinished:
        lines += [f"Not finished: {'; '.join(unfinished)} steps.", ""]
    if drawn:
        lines += [f"![{case.title}]({case.name}/comparison.png)", ""]
    lines += [
        f"Settings: the zoo's {case.sb3.zoo_entry} on both sides; ours `--preset "
        f"{case.preset}` with the `--set`s in each `run.json`'s command. What differs:",
        "",
        *(f"- {note}" for note in case.notes),
    ]
    return "\n".join(lines) + "\n"


def machine_lines(sides_by_case: Sequence[Mapping[str, Side]]) -> list[str]:
    machines: dict[tuple[Any, ...], set[str]] = {}
    for sides in sides_by_case:
        for side in sides.values():
            for record in side.records:
                m = record.get("machine") or {}
                key = (m.get("cpu"), m.get("cores"), (m.get("versions") or {}).get("torch"))
                machines.setdefault(key, set()).add((record.get("commit") or "?")[:10])
    if not machines:
        return ["- no run yet"]
    return [
        f"- {cpu}, {cores} cores, torch {torch_version}: commits {', '.join(sorted(commits))}"
        for (cpu, cores, torch_version), commits in sorted(machines.items(), key=str)
    ]


def report(results: Path, quick: bool) -> Path:
    """``results/README.md`` and each case's ``comparison.png`` from the finished runs."""
    all_sides = [{lib: read_side(results, case, lib) for lib in LIBS} for case in CASES.values()]
    rows, sections = [], []
    for case, sides in zip(CASES.values(), all_sides, strict=True):
        ran = any(side.records for side in sides.values())
        drawn = ran and plot_case(case, sides, results / case.name / "comparison.png", quick)
        rows.append(case_row(case, sides, quick))
        sections.append(case_section(results, case, sides, drawn, quick))
    text = [
        "# Learning results: rl-suite and Stable-Baselines3 side by side",
        "",
        "Generated by `python benchmarks/learning_suite.py report` from the finished runs under "
        "this directory (each `<case>/<library>/seed_<n>/` holds `curve.csv` and `run.json`: "
        "commit, machine, command, times); do not edit by hand. How the runs are made: the "
        "docstring of `benchmarks/learning_suite.py`.",
        "",
    ]
    if quick:
        text += ["**`--quick` runs: a few thousand steps each; the numbers mean nothing.**", ""]
    text += [
        "Final return: per run, the mean of the last 10% of its evaluations; then the mean ± "
        "standard deviation over seeds. Steps/s: training env steps per second, evaluations "
        "excluded, mean over seeds; wall: a run's whole time (start-ups, evaluations, "
        "checkpoints, and work lost to a stop included), mean over seeds. One torch thread "
        "per run, on a machine that may have been shared (see each run's load average).",
        "",
        "The zoo's column is **read from the zoo's benchmark (benchmark.md of "
        "rl-baselines3-zoo), not run here**: one agent trained by the zoo for the budget "
        "named (often more than here), on the environment version named, its mean return "
        "over ~150k steps of evaluation.",
        "",
        "| case | env steps | rl-suite final return | SB3 final return "
        "| zoo (read, not run here) | rl-suite steps/s | SB3 steps/s | steps/s ours / SB3 "
        "| rl-suite wall | SB3 wall |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        *rows,
        "",
        "## Machines",
        "",
        *machine_lines(all_sides),
        "",
        "## Cases",
        "",
        *sections,
    ]
    write_atomic(results / "README.md", "\n".join(text))
    return results / "README.md"


# ---------------------------------------------------------------------------------- main


def run_cases(
    results: Path,
    cases: Sequence[Case],
    libs: Sequence[str],
    seeds: Sequence[int] | None,
    quick: bool,
    threads: int,
) -> list[Outcome]:
    """Every run asked for, seed by seed across the cases (each case gets its first seeds
    early), skipping SB3's when it is not installed."""
    if "sb3" in libs and not sb3_available():
        print("stable-baselines3 is not installed: SB3's runs are left out")
        libs = [lib for lib in libs if lib != "sb3"]
    todo = [p for case in cases for p in run_paths(results, case, libs, seeds, quick)]
    todo.sort(key=lambda p: (p.seed, list(CASES).index(p.case), LIBS.index(p.lib)))
    outcomes = []
    for paths in todo:
        if _STOP_REQUESTED:
            break
        case = CASES[paths.case]
        print(f"{case.name} {LIB_NAMES[paths.lib]} seed {paths.seed}: {paths.dir}", flush=True)
        started = time.time()
        outcome = run_one(case, paths, quick, threads, echo=not quick)
        minutes = (time.time() - started) / 60
        print(f"  -> {outcome.status} ({minutes:.1f} min) {outcome.detail}", flush=True)
        outcomes.append(outcome)
        if outcome.status == "stopped":
            break
    return outcomes


def parse_seeds(text: str) -> list[int]:
    try:
        return [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--seeds takes 0,1,2; got {text!r}") from None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    # The options go before or after the command (SUPPRESS: a command's parser sets only what
    # it was given, the main parser's defaults stay).
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--quick",
        action="store_true",
        default=argparse.SUPPRESS,
        help="tiny runs, a few thousand steps (CI); in a temporary directory unless --results",
    )
    common.add_argument(
        "--results",
        type=Path,
        default=argparse.SUPPRESS,
        help=f"the results directory (default {RESULTS.relative_to(ROOT)})",
    )
    common.add_argument(
        "--threads",
        type=int,
        default=argparse.SUPPRESS,
        help="torch threads of each run, both sides (default 1; 0: torch's default)",
    )
    parser = argparse.ArgumentParser(
        parents=[common],
        description="rl-suite and SB3 on MuJoCo and Atari with the zoo's settings (issue 33); "
        "--quick alone runs every case briefly, then status and report",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    run = commands.add_parser(
        "run", parents=[common], help="run a case (or all), continuing stopped runs"
    )
    run.add_argument("case", choices=[*CASES, "all"], metavar="CASE", help=", ".join(CASES))
    run.add_argument("--lib", choices=["ours", "sb3", "both"], default="both")
    run.add_argument("--seeds", type=parse_seeds, help="e.g. 0,1,2 (default: the case's)")
    commands.add_parser("status", parents=[common], help="what is done, running, stopped, missing")
    commands.add_parser("report", parents=[common], help="write results/README.md and PNGs")
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["_sb3"]:  # (SB3's side of one run, started by `run`)
        child = argparse.ArgumentParser(prog="learning_suite.py _sb3", parents=[common])
        child.set_defaults(quick=False, threads=1)
        child.add_argument("case", choices=list(CASES))
        child.add_argument("seed", type=int)
        child.add_argument("work", type=Path)
        args = child.parse_args(argv[1:])
        args.command = "_sb3"
        return args
    args = parser.parse_args(argv)
    # (defaults here, not in set_defaults: a command's parser would reset options given
    # before the command to the main parser's defaults)
    for name, default in (("quick", False), ("results", None), ("threads", 1)):
        if not hasattr(args, name):
            setattr(args, name, default)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.command == "_sb3":
        return sb3_child(args.case, args.seed, args.work, args.quick, args.threads)
    if args.command is None and not args.quick:
        parse_args(["--help"])
    with contextlib.ExitStack() as stack:
        results = args.results
        temporary = results is None and args.quick
        if temporary:
            results = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="suite-")))
        results = (results or RESULTS).resolve()
        if args.command == "status":
            print(status(results, args.quick))
            return 0
        if args.command == "report":
            print(f"report: {report(results, args.quick)}")
            return 0
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, _forward_signal)
        if args.command is None:  # --quick alone: everything, then status and report
            cases, libs, seeds = list(CASES.values()), list(LIBS), None
        else:
            cases = list(CASES.values()) if args.case == "all" else [CASES[args.case]]
            libs = list(LIBS) if args.lib == "both" else [args.lib]
            seeds = args.seeds
        started = time.time()
        outcomes = run_cases(results, cases, libs, seeds, args.quick, args.threads)
        print(status(results, args.quick))
        written = report(results, args.quick)
        if temporary:  # (the report's table; the directory goes at exit)
            print("\n".join(line for line in written.read_text().splitlines() if line[:1] == "|"))
            print(f"(results in {results}, removed at exit: --results DIR keeps them)")
        else:
            print(f"report: {written}")
        failed = [o for o in outcomes if o.status == "failed"]
        print(
            f"{len(outcomes)} runs in {(time.time() - started) / 60:.1f} min, {len(failed)} failed"
        )
        for outcome in failed:
            print(f"FAILED {outcome.paths.dir}: {outcome.detail}")
        if _STOP_REQUESTED:
            return EXIT_STOPPED
        return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
