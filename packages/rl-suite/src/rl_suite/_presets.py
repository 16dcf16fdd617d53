"""The named presets of ``rl-suite train --preset``: each a partial configuration (see
``_config``) that ``make_config`` lays over the defaults, and ``PRESET_ABOUT``, the line
``rl-suite list`` shows for each.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PRESETS", "PRESET_ABOUT"]


_CARTPOLE_PPO = {
    "discount": 0.98,
    "gae_lambda": 0.8,
    "learning_rate": 1e-3,
    "ratio_clip": 0.2,
    "epochs": 20,
    "minibatches": 1,
    "entropy_loss_coeff": 0.0,
    "value_loss_coeff": 0.5,
    "linear_lr_schedule": True,
}

# DQN on CartPole (rl-baselines3-zoo's settings, as replay ratio and iterations: 128 updates
# of 64 transitions after each 256 steps, the target net copied once per 128 updates,
# epsilon from 1 to 0.04 over the first 8k steps, a 256x256 MLP), with double DQN, dueling
# heads and 3-step returns.
_CARTPOLE_DQN = {
    "discount": 0.99,
    "batch_size": 64,
    "learning_rate": 2.3e-3,
    "replay_size": 100_000,
    "replay_ratio": 32,
    "min_steps_learn": 1_000,
    "target_update_interval": 128,
    "eps_steps": 8_000,
    "n_step_return": 3,
    "double_dqn": True,
    "delta_clip": 1.0,
    "clip_grad_norm": 10.0,
}
_CARTPOLE_Q = {
    "env": "CartPole-v1",
    "steps": 100_000,
    "torch_threads": 1,
    "agent": {"model_kwargs": {"hidden_sizes": [256, 256], "dueling": True}},
    "agent_kwargs": {"eps_final": 0.04, "eps_eval": 0.0},
    "runner": {"log_interval_steps": 5_000},
}

# The reference's Atari DQN configuration: 104x80 frames, 4 of them (stored frame by frame),
# clipped rewards, episodic lives, 16 environments x 2 steps per iteration.
# PPO on Atari: the reference's settings (rlpyt's atari_ff_ppo).
_ATARI_PPO: dict[str, Any] = {
    "discount": 0.99,
    "gae_lambda": 0.95,
    "learning_rate": 1e-3,
    "ratio_clip": 0.1,
    "epochs": 4,
    "minibatches": 4,
    "entropy_loss_coeff": 0.01,
    "value_loss_coeff": 1.0,
    "linear_lr_schedule": True,
}

_ATARI_DQN: dict[str, Any] = {
    "env": "atari:pong",
    "steps": 50_000_000,
    "sampler": {
        "kind": "cpu",
        "batch_T": 2,
        "batch_B": 16,
        "max_decorrelation_steps": 1000,
        "eval_n_envs": 8,
        "eval_max_steps": 125_000,
        "eval_max_trajectories": 16,
    },
    "runner": {"log_interval_steps": 1_000_000},
    "agent_kwargs": {"eps_final": 0.01, "eps_eval": 0.001},
}

# SAC, TD3 and DDPG on Pendulum-v1: one environment, one update per step (replay_ratio =
# batch_size), a replay that holds the whole run. From rl-baselines3-zoo's Pendulum-v1
# settings: learning rates 1e-3; TD3's and DDPG's discount 0.98 and exploration noise 0.1;
# SAC's and DDPG's batches of 256 and tau 0.005 (SB3's defaults). From rlpyt: TD3's batches
# of 100, its noise of 0.5 before learning starts (for DDPG too), SAC's 0.75. Learning starts
# earlier than the zoo's (SAC 1k, TD3 2k, DDPG 5k): tried on a few seeds, they reach the
# learning tests' bars within 4k to 11k steps. Evaluations: 10 episodes (10 environments at
# once) every 1,000 steps, so `runner.stop_return` stops soon after the bar is reached; the
# start angle varies a lot, so fewer episodes would be noisy.
_PENDULUM_QPG = {
    "env": "Pendulum-v1",
    "steps": 20_000,
    "torch_threads": 1,
    "sampler": {
        "batch_T": 1,
        "batch_B": 1,
        "eval_n_envs": 10,
        "eval_max_steps": 2_000,
        "eval_max_trajectories": 10,
    },
    "runner": {"log_interval_steps": 1_000},
}
_PENDULUM_NOISE = {"action_std": 0.1, "pretrain_std": 0.5}

# The reference's MuJoCo configurations (rlpyt's experiments/configs/mujoco/qpg): one
# environment, one update per step (replay_ratio = batch_size), 1M steps, learning from 10k,
# a replay of 1M, an evaluation of 50 episodes (at most 51k steps, 10 environments) every 10k
# steps. Networks: the agents' defaults, rlpyt's ([256, 256] for SAC, [400, 300] otherwise).
_MUJOCO_QPG = {
    "env": "HalfCheetah-v5",
    "steps": 1_000_000,
    "sampler": {
        "batch_T": 1,
        "batch_B": 1,
        "eval_n_envs": 10,
        "eval_max_steps": 51_000,
        "eval_max_trajectories": 50,
    },
    "runner": {"log_interval_steps": 10_000},
}
_MUJOCO_REPLAY = {"discount": 0.99, "min_steps_learn": 10_000, "replay_size": 1_000_000}

# PPO on MuJoCo locomotion: rl-baselines3-zoo's tuned settings for Hopper (hyperparams/ppo.yml,
# Hopper-v4; its HalfCheetah and Walker2d entries change the values, not the shape: see
# benchmarks/learning_suite.py). One environment x 512 steps, 5 epochs of 16 minibatches of 32,
# constant learning rate and ratio clip, advantages standardised per minibatch, Adam eps 1e-5
# (SB3's), value_loss_coeff twice the zoo's vf_coef (ours is on 0.5 x the squared error);
# separate [256, 256] ReLU MLPs, a linear mean, log std from -2, observations standardised by
# running statistics. The zoo also normalises rewards (VecNormalize), which our PPO does not do.
# Evaluation as the zoo's: deterministic, 10 whole episodes, one after another.
_MUJOCO_PPO = {
    "discount": 0.999,
    "gae_lambda": 0.99,
    "learning_rate": 9.80828e-5,
    "linear_lr_schedule": False,
    "ratio_clip": 0.2,
    "epochs": 5,
    "minibatches": 16,
    "entropy_loss_coeff": 0.00229519,
    "value_loss_coeff": 2 * 0.835671,
    "clip_grad_norm": 0.7,
    "normalize_advantage": "minibatch",
    "optim_kwargs": {"eps": 1e-5, "fused": True},
    "normalize_reward": True,  # the zoo's VecNormalize scales rewards too
}

# PPO in rsl_rl's style, its usual settings (as benchmarks/vec_env.py sets both sides), for
# batched environments: 4096 envs x 24 steps, 5 epochs x 4 minibatches, Adam at 1e-3 adapted
# to a KL of 0.01, value clipping, gradients clipped at 1 (policy and value each), entropy
# 0.01, MLPs [256, 128, 64] ELU; no evaluation (training episodes are the log's returns).
_BATCHED_PPO = {
    "discount": 0.99,
    "gae_lambda": 0.95,
    "learning_rate": 1e-3,
    "linear_lr_schedule": False,
    "desired_kl": 0.01,
    "ratio_clip": 0.2,
    "value_clip": 0.2,
    "epochs": 5,
    "minibatches": 4,
    "entropy_loss_coeff": 0.01,
    "value_loss_coeff": 2.0,  # on 0.5 * (v - R)^2: rsl_rl's value_loss_coef 1.0 on (v - R)^2
    "clip_grad_norm": 1.0,
    "clip_grad_separately": True,
    "normalize_advantage": True,
}

# Each preset: the algorithm it is for, and what it changes in the defaults.
PRESETS: dict[str, dict[str, Any]] = {
    "cartpole": {
        "algo": "ppo",
        "env": "CartPole-v1",
        "steps": 100_000,
        "torch_threads": 1,  # small networks: a second thread costs more than it gives
        "algo_kwargs": _CARTPOLE_PPO,
    },
    "cartpole-a2c": {
        "algo": "a2c",
        "env": "CartPole-v1",
        "steps": 500_000,
        "torch_threads": 1,
        "sampler": {"batch_T": 5, "batch_B": 16},
        "runner": {"log_interval_steps": 25_000},
        "algo_kwargs": {
            "discount": 0.99,
            "learning_rate": 7e-4,
            "entropy_loss_coeff": 0.0,
            "value_loss_coeff": 0.5,
            "gae_lambda": 1.0,
            "normalize_advantage": False,
        },
    },
    "cartpole-masked-lstm": {
        "algo": "ppo",
        "env": "CartPole-v1",
        "env_kwargs": {"observation_indices": [0, 2]},  # positions only: velocities hidden
        "steps": 300_000,
        "torch_threads": 1,
        "agent": {"recurrent": True},
        # Wait-reset: a training sequence never runs across an episode's reset.
        "sampler": {"batch_T": 32, "batch_B": 8, "mid_batch_reset": False},
        "algo_kwargs": _CARTPOLE_PPO,
    },
    "batched": {
        "algo": "ppo",
        "env": "torch:cartpole",
        "steps": 5_000_000,
        "torch_threads": 1,  # small networks: see "cartpole"
        "sampler": {"kind": "batched", "batch_T": 24, "batch_B": 4096},
        "agent": {"model_kwargs": {"hidden_sizes": [256, 128, 64], "hidden_nonlinearity": "ELU"}},
        "runner": {"evaluate": False},
        "algo_kwargs": _BATCHED_PPO,
    },
    "inverted-pendulum": {
        "algo": "ppo",
        "env": "InvertedPendulum-v5",
        "steps": 150_000,
        "torch_threads": 1,
        "sampler": {"batch_T": 256, "batch_B": 8},
        "agent": {"model_kwargs": {"normalize_observation": True}},
        "runner": {"log_interval_steps": 20_000},
        "algo_kwargs": {
            "discount": 0.99,
            "gae_lambda": 0.95,
            "learning_rate": 3e-4,
            "ratio_clip": 0.2,
            "epochs": 10,
            "minibatches": 32,
            "entropy_loss_coeff": 0.0,
            "value_loss_coeff": 0.5,
            "linear_lr_schedule": True,
            "normalize_advantage": True,
        },
    },
    # The reference's Atari configurations: 104x80 frames, 4 of them, clipped rewards,
    # episodic lives, parallel workers.
    "atari": {
        "algo": "ppo",
        "env": "atari:pong",
        "steps": 10_000_000,
        "sampler": {"kind": "cpu", "batch_T": 128, "batch_B": 8, "max_decorrelation_steps": 1000},
        "runner": {"log_interval_steps": 100_000},
        "algo_kwargs": _ATARI_PPO,
    },
    # Least wall-clock to a game score of 20 on Pong with one GPU and 16 cores: many envs
    # stepped by two alternating groups of workers while the GPU acts for the other group,
    # large minibatches, compiled updates replayed as CUDA graphs.
    "atari-fast": {
        "algo": "ppo",
        "env": "atari:pong",
        "steps": 10_000_000,
        "device": "cuda",
        "sampler": {"kind": "alternating", "batch_T": 64, "batch_B": 64},
        "runner": {"log_interval_steps": 100_000, "evaluate": False},
        "algo_kwargs": {
            "discount": 0.99,
            "gae_lambda": 0.95,
            "learning_rate": 2.5e-4,
            "ratio_clip": 0.1,
            "epochs": 4,
            "minibatches": 4,
            "entropy_loss_coeff": 0.01,
            "value_loss_coeff": 0.5,
            "clip_grad_norm": 0.5,
            "linear_lr_schedule": True,
            "compile": True,
        },
    },
    # The "atari" settings on ale-py's vector env (BatchedSampler: one process, ALE's threads).
    "atari-batched": {
        "algo": "ppo",
        "env": "ale:pong",
        "steps": 10_000_000,
        "sampler": {"kind": "batched", "batch_T": 128, "batch_B": 16},
        "runner": {"log_interval_steps": 100_000, "evaluate": False},
        "algo_kwargs": _ATARI_PPO,
    },
    "atari-a2c": {
        "algo": "a2c",
        "env": "atari:pong",
        "steps": 10_000_000,
        "sampler": {"kind": "cpu", "batch_T": 5, "batch_B": 16, "max_decorrelation_steps": 1000},
        "runner": {"log_interval_steps": 100_000},
        "algo_kwargs": {"discount": 0.99, "learning_rate": 7e-4, "entropy_loss_coeff": 0.01},
    },
    "cartpole-dqn": {**_CARTPOLE_Q, "algo": "dqn", "algo_kwargs": _CARTPOLE_DQN},
    "cartpole-dqn-prioritized": {
        **_CARTPOLE_Q,
        "algo": "dqn",
        "algo_kwargs": {**_CARTPOLE_DQN, "prioritized_replay": True, "pri_beta_steps": 100_000},
    },
    "cartpole-catdqn": {
        **_CARTPOLE_Q,
        "algo": "catdqn",
        # discounted returns of CartPole lie in [0, 1 / (1 - 0.99)]
        "algo_kwargs": {**_CARTPOLE_DQN, "V_min": 0.0, "V_max": 100.0},
    },
    "cartpole-r2d1": {
        **_CARTPOLE_Q,
        "algo": "r2d1",
        "agent": {"model_kwargs": {"hidden_sizes": [64], "lstm_size": 64}},
        "sampler": {"batch_T": 40, "batch_B": 8},
        "algo_kwargs": {
            "discount": 0.99,
            "batch_T": 40,
            "batch_B": 16,
            "warmup_T": 20,
            "store_rnn_state_interval": 20,
            "replay_size": 100_000,
            "replay_ratio": 4,
            "min_steps_learn": 5_000,
            "target_update_interval": 100,
            "n_step_return": 3,
            "learning_rate": 1e-3,
            "eps_steps": 20_000,
        },
    },
    "atari-dqn": {
        **_ATARI_DQN,
        "algo": "dqn",
        "algo_kwargs": {
            "discount": 0.99,
            "batch_size": 32,
            "learning_rate": 1e-4,
            "replay_size": 1_000_000,
            "replay_ratio": 8,
            "min_steps_learn": 50_000,
            "target_update_interval": 312,
            "eps_steps": 1_000_000,
            "clip_grad_norm": 10.0,
            "frame_buffer": True,
        },
    },
    "atari-catdqn": {
        **_ATARI_DQN,
        "algo": "catdqn",
        "algo_kwargs": {
            "discount": 0.99,
            "batch_size": 32,
            "learning_rate": 2.5e-4,
            "replay_size": 1_000_000,
            "replay_ratio": 8,
            "min_steps_learn": 50_000,
            "target_update_interval": 312,
            "eps_steps": 1_000_000,
            "clip_grad_norm": 10.0,
            "V_min": -10.0,
            "V_max": 10.0,
            "frame_buffer": True,
        },
    },
    # R2D1 as the reference configures it: unclipped rewards (value rescaling instead), whole
    # games as episodes, sequences of 40 + 80 steps, per-environment epsilons (Ape-X).
    "atari-r2d1": {
        **_ATARI_DQN,
        "algo": "r2d1",
        "env_kwargs": {"episodic_lives": False, "clip_reward": False, "horizon": 27_000},
        "sampler": {**_ATARI_DQN["sampler"], "batch_T": 40, "batch_B": 32},
        "agent_kwargs": {"eps_final": 0.1, "eps_final_min": 0.0005, "eps_eval": 0.001},
        "algo_kwargs": {
            "discount": 0.997,
            "batch_T": 80,
            "batch_B": 64,
            "warmup_T": 40,
            "store_rnn_state_interval": 40,
            "replay_size": 1_000_000,
            "replay_ratio": 1,
            "min_steps_learn": 100_000,
            "target_update_interval": 2500,
            "n_step_return": 5,
            "learning_rate": 1e-4,
            "clip_grad_norm": 80.0,
            "eps_steps": 1_000_000,
            "frame_buffer": True,
        },
    },
    "pendulum-sac": {
        **_PENDULUM_QPG,
        "algo": "sac",
        "algo_kwargs": {
            "discount": 0.99,
            "batch_size": 256,
            "replay_ratio": 256,
            "learning_rate": 1e-3,
            "min_steps_learn": 1_000,
            "replay_size": 100_000,
        },
    },
    "pendulum-td3": {
        **_PENDULUM_QPG,
        "algo": "td3",
        "agent_kwargs": _PENDULUM_NOISE,
        "algo_kwargs": {
            "discount": 0.98,
            "batch_size": 100,
            "replay_ratio": 100,
            "learning_rate": 1e-3,
            "q_learning_rate": 1e-3,
            "min_steps_learn": 2_000,
            "replay_size": 100_000,
        },
    },
    "pendulum-ddpg": {
        **_PENDULUM_QPG,
        "algo": "ddpg",
        "agent_kwargs": _PENDULUM_NOISE,
        "algo_kwargs": {
            "discount": 0.98,
            "batch_size": 256,
            "replay_ratio": 256,
            "learning_rate": 1e-3,
            "q_learning_rate": 1e-3,
            "target_update_tau": 0.005,
            "min_steps_learn": 5_000,
            "replay_size": 100_000,
        },
    },
    "ppo-mujoco": {
        "algo": "ppo",
        "env": "Hopper-v5",
        "env_kwargs": {"clip_action": True},
        "steps": 1_000_000,
        "sampler": {
            "batch_T": 512,
            "batch_B": 1,
            "eval_n_envs": 1,
            "eval_max_steps": 10_000,
            "eval_max_trajectories": 10,
        },
        "agent": {
            "deterministic_eval": True,
            "model_kwargs": {
                "hidden_sizes": [256, 256],
                "hidden_nonlinearity": "ReLU",
                "mu_nonlinearity": None,
                "init_log_std": -2.0,
                "normalize_observation": True,
            },
        },
        "runner": {"log_interval_steps": 20_480},
        "algo_kwargs": _MUJOCO_PPO,
    },
    # rlpyt's sac_1M_serial, without reward_scale=5 and policy_output_regularization=0.001:
    # settings of rlpyt's first SAC (a value network and a fixed temperature); with a learned
    # temperature the entropy target sets that balance (SAC's authors then used 1).
    "mujoco-sac": {
        **_MUJOCO_QPG,
        "algo": "sac",
        "algo_kwargs": {
            **_MUJOCO_REPLAY,
            "batch_size": 256,
            "replay_ratio": 256,
            "target_update_tau": 0.005,
            "learning_rate": 3e-4,
        },
    },
    "mujoco-td3": {  # rlpyt's td3_serial_bstl
        **_MUJOCO_QPG,
        "algo": "td3",
        "algo_kwargs": {
            **_MUJOCO_REPLAY,
            "batch_size": 100,
            "replay_ratio": 100,
            "target_update_tau": 0.005,
            "target_update_interval": 2,
            "policy_update_interval": 2,
            "learning_rate": 1e-3,
            "q_learning_rate": 1e-3,
        },
    },
    "mujoco-ddpg": {  # rlpyt's ddpg_from_td3_1M_serial
        **_MUJOCO_QPG,
        "algo": "ddpg",
        "algo_kwargs": {
            **_MUJOCO_REPLAY,
            "batch_size": 100,
            "replay_ratio": 100,
            "target_update_tau": 0.01,
            "learning_rate": 1e-3,
            "q_learning_rate": 1e-3,
        },
    },
}


PRESET_ABOUT = {
    "cartpole": "PPO on CartPole-v1, 8 envs x 32 steps, 20 epochs: 500 within 100k steps",
    "cartpole-a2c": "A2C on CartPole-v1, 16 envs x 5 steps, 500k steps",
    "cartpole-masked-lstm": "recurrent PPO on CartPole-v1 seeing positions only (needs memory)",
    "batched": "PPO in rsl_rl's style on torch:<name> / vec:<gym id>, 4096 envs x 24 steps",
    "inverted-pendulum": "Gaussian PPO on MuJoCo InvertedPendulum-v5, normalised observations",
    "atari": "PPO on Atari (atari:<game>), the reference's configuration, CPU workers",
    "atari-fast": "PPO Pong speedrun for one GPU and 16 cores: 64 envs on alternating "
    "workers, compiled updates (minutes to a score of 20: not yet measured on a GPU)",
    "atari-batched": "PPO on Atari with ale-py's vector env (ale:<game>), 16 envs x 128 steps",
    "atari-a2c": "A2C on Atari (atari:<game>), the reference's configuration, CPU workers",
    "cartpole-dqn": "DQN (double, dueling, 3-step) on CartPole-v1, zoo settings: 100k steps",
    "cartpole-dqn-prioritized": "the same with prioritized replay",
    "cartpole-catdqn": "categorical DQN (51 atoms on [0, 100]) on CartPole-v1",
    "cartpole-r2d1": "R2D1 on CartPole-v1: 40-step sequences after a 20-step burn-in",
    "atari-dqn": "DQN on Atari (atari:<game>), the reference's configuration, frame buffer",
    "atari-catdqn": "categorical DQN on Atari, the reference's configuration, frame buffer",
    "atari-r2d1": "R2D1 on Atari, the reference's configuration, unclipped rewards",
    "pendulum-sac": "SAC on Pendulum-v1, one update per step: -200 within 20k steps",
    "pendulum-td3": "TD3 on Pendulum-v1, one update per step: -200 within 20k steps",
    "pendulum-ddpg": "DDPG on Pendulum-v1, one update per step: -250 within 20k steps",
    "ppo-mujoco": "Gaussian PPO on MuJoCo locomotion, the zoo's tuned Hopper settings: 1 env "
    "x 512 steps, normalised observations and rewards, clipped actions, 1M steps",
    "mujoco-sac": "SAC on MuJoCo locomotion, the reference's configuration, 1M steps",
    "mujoco-td3": "TD3 on MuJoCo locomotion, the reference's configuration, 1M steps",
    "mujoco-ddpg": "DDPG on MuJoCo locomotion, the reference's configuration, 1M steps",
}
assert PRESET_ABOUT.keys() == PRESETS.keys()


# The MuJoCo locomotion tasks the mujoco-* presets are made for (any version of each).
