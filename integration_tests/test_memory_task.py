"""Memory, for real: R2D1 solves a task whose rewarded action depends on a cue shown several
steps earlier, and a feed-forward DQN trained the same way stays at chance.

The task, ``CueMemoryEnv``: the first observation shows a cue, one of ``N_CUES`` values
(one-hot); the next ``DELAY`` observations are blank but for a query flag on the last of
them; the action taken at the query ends the episode, with reward 1 if it names the cue and
0 otherwise (earlier actions change nothing and earn nothing). The cue is absent from the
observation at the query, so a policy without memory is right by chance only: its expected
return is ``1 / N_CUES`` = 0.5, the optimal return is 1.

Each learning test trains one run per seed in ``RL_SUITE_LEARNING_SEEDS`` (comma-separated;
default ``0``, what CI runs), as ``test_learning.py`` does, and with
``RL_SUITE_LEARNING_RESULTS`` set to a file appends one JSON line per run to it. Evaluations
are greedy (``eps_eval=0``) over 200 episodes, every ``LOG_INTERVAL`` steps.

* R2D1 passes when at least 4 of every 5 seeds (all of them with fewer than 5) reach 90% of
  the optimal return and hold it: every one of the last ``HELD_EVALS`` evaluations within
  the budget is at the bar. (The best evaluation alone is not enough here: an LSTM that has
  not learned the task still carries some trace of the cue, and its greedy answers can line
  up with the cue on all 200 episodes by luck; evaluations of exactly 1.0 or 0.0 among
  others at chance show up before learning sets in.)
  The trained agent must also answer from its recurrent state: with the previous-action
  input forced to one value through the delay (the agent could otherwise echo the cue in
  its own actions), its greedy answer at the query is still the cue.
* Feed-forward DQN, with the same budget, replay, updates and exploration, passes when no
  evaluation of any seed exceeds ``CHANCE_CEILING``. Its model sees only the observation,
  which is the same at every query, so its greedy answer is one fixed action and each
  evaluation's return is the share of its 200 episodes whose cue is that action:
  Binomial(200, 0.5) / 200, standard deviation 0.035. The ceiling 0.65 is 4.2 of those
  above chance: a false alarm over 21 evaluations and 5 seeds has odds of about 1 in 1,400.
* The same DQN learns the task when the cue is still in view at the query (``delay=0``), so
  its failure above is the missing memory, not a broken learner.
"""

from __future__ import annotations

import csv
import json
import os

import numpy as np
import pytest
import torch

from rl_agents import VectorDqnAgent, VectorR2d1Agent
from rl_algos import DQN, R2D1
from rl_arrays import EnvStep, namedarraytuple
from rl_runners import MinibatchRlEval, logger_context
from rl_samplers import CpuResetCollector, Env, FloatBox, IntBox, SerialSampler, check_env

SEEDS = [int(seed) for seed in os.environ.get("RL_SUITE_LEARNING_SEEDS", "0").split(",")]

N_CUES = 2
DELAY = 5  # steps from the cue to the query
EPISODE = DELAY + 1  # steps per episode
OPTIMAL = 1.0
CHANCE = 1.0 / N_CUES
BAR = 0.9 * OPTIMAL
CHANCE_CEILING = CHANCE + 0.15

CueInfo = namedarraytuple("CueInfo", ["timeout"])


class CueMemoryEnv(Env):
    """Remember the cue. Observation ``[cue one-hot (n_cues), query flag]``, actions
    ``0 .. n_cues - 1``.

    Step 0 shows the cue; steps 1 .. ``delay`` show zeros, the query flag set at step
    ``delay`` (with ``delay=0`` the cue and the flag show together); the action at the query
    earns 1 if it equals the cue, else 0, and ends the episode. Cues are drawn uniformly
    from the environment's seeded generator.
    """

    def __init__(self, n_cues: int = N_CUES, delay: int = DELAY):
        if n_cues < 2 or delay < 0:
            raise ValueError(f"need n_cues >= 2 and delay >= 0, got {n_cues} and {delay}")
        self.n_cues, self.delay = int(n_cues), int(delay)
        self._observation_space = FloatBox(0.0, 1.0, shape=(self.n_cues + 1,))
        self._action_space = IntBox(0, self.n_cues)
        self.rng = np.random.default_rng()
        self.cue, self.t = 0, 0

    def seed(self, seed):
        super().seed(seed)
        self.rng = np.random.default_rng(seed)

    def reset(self):
        self.cue, self.t = int(self.rng.integers(self.n_cues)), 0
        return self._observation()

    def _observation(self):
        observation = np.zeros(self.n_cues + 1, np.float32)
        if self.t == 0:
            observation[self.cue] = 1.0
        if self.t == self.delay:
            observation[-1] = 1.0
        return observation

    def step(self, action):
        if self.t == self.delay:  # the query: this action is judged, and the episode ends
            self.t += 1
            reward = float(int(action) == self.cue)
            return EnvStep(np.zeros(self.n_cues + 1, np.float32), reward, True, CueInfo(False))
        self.t += 1
        return EnvStep(self._observation(), 0.0, False, CueInfo(False))

    @property
    def horizon(self):
        return self.delay + 1


# ------------------------------------------------------------------ training settings

LOG_INTERVAL = 1_440  # 6 sampler batches of 240 steps (40 episodes of 6 steps each)
STEP_BUDGET = 20 * LOG_INTERVAL  # 28,800 steps, 4,800 episodes
HELD_EVALS = 3  # the last 3 evaluations: at steps 25,920, 27,360 and 28,800
EVAL_EPISODES = 200
SAMPLER = dict(batch_T=4 * EPISODE, batch_B=10, eval_n_envs=10)
EPSILON = dict(eps_init=1.0, eps_final=0.05, eps_eval=0.0)
# Shared by both algorithms: 20 gradient steps per sampler batch of 240 steps, each on 32
# episodes' worth of training steps (192), with the same exploration schedule.
ALGO = dict(
    discount=0.9,
    learning_rate=3e-3,
    min_steps_learn=1_200,
    eps_steps=6_000,
    replay_size=20_000,
    target_update_interval=100,
    n_step_return=EPISODE,
    delta_clip=None,
    double_dqn=True,
    prioritized_replay=True,
)
# R2D1's sequences start where the rnn state was stored, every EPISODE steps: with no
# decorrelation steps every episode starts there too, so each replayed sequence is one
# episode of warm-up (burn-in) followed by the next whole episode, trained from the zero
# state its start gets when the warm-up's episode ends.
R2D1_ALGO = dict(
    batch_T=EPISODE,
    batch_B=32,
    warmup_T=EPISODE,
    store_rnn_state_interval=EPISODE,
    replay_ratio=32,  # (warm-up + training steps) * batch_B = 384 samples per update
)
DQN_ALGO = dict(batch_size=EPISODE * 32, replay_ratio=16)
R2D1_MODEL = dict(hidden_sizes=[32], lstm_size=32, head_size=32)
DQN_MODEL = dict(hidden_sizes=[32, 32])


def train(kind, seed, log_dir, steps=STEP_BUDGET, delay=DELAY):
    """Train ``kind`` ("r2d1" or "dqn") on the cue task for ``steps``: ``(evaluations, agent)``
    with the evaluations as ``(CumSteps, ReturnAverage)``, the one before training first."""
    if kind == "r2d1":
        agent = VectorR2d1Agent(model_kwargs=R2D1_MODEL, **EPSILON)
        algo = R2D1(**ALGO, **R2D1_ALGO)
    else:
        agent = VectorDqnAgent(model_kwargs=DQN_MODEL, **EPSILON)
        algo = DQN(**ALGO, **DQN_ALGO)
    sampler = SerialSampler(
        CueMemoryEnv,
        dict(delay=delay),
        CollectorCls=CpuResetCollector,
        max_decorrelation_steps=0,
        eval_max_steps=EVAL_EPISODES * (delay + 1),
        eval_max_trajectories=EVAL_EPISODES,
        **SAMPLER,
    )
    runner = MinibatchRlEval(
        algo=algo,
        agent=agent,
        sampler=sampler,
        n_steps=steps,
        seed=seed,
        affinity={"master_torch_threads": 1},
        log_interval_steps=LOG_INTERVAL,
    )
    with logger_context(log_dir, seed, f"{kind}-cue-memory", override_prefix=True) as run_dir:
        runner.train()
    with open(run_dir / "progress.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert all(int(r["TrajsInEval"]) == EVAL_EPISODES for r in rows)
    return [(int(r["CumSteps"]), float(r["ReturnAverage"])) for r in rows], agent


def answers_with_fixed_prev_action(agent, delay=DELAY):
    """The trained recurrent agent's greedy answers at the query, ``[cue, forced action]``:
    each episode's observations are given with the previous-action input forced to one
    action through the delay (null at the first step, rewards zero, as before a query)."""
    n = N_CUES
    observation = torch.zeros(delay + 1, n, n, n + 1)  # [T, cue, forced action, obs]
    observation[0, torch.arange(n), :, torch.arange(n)] = 1.0
    observation[delay, :, :, n] = 1.0
    prev_action = torch.arange(n).expand(delay + 1, n, n).clone()
    prev_action[0] = 0
    T, B = delay + 1, n * n
    agent.eval_mode(0)
    with torch.no_grad():
        q, _ = agent(
            observation.reshape(T, B, n + 1), prev_action.reshape(T, B), torch.zeros(T, B), None
        )
    return q[-1].argmax(dim=-1).reshape(n, n)


def _record(case, seed, evaluations, bar, score):
    """One JSON line as ``test_learning.py`` writes them, plus the score the test judges and
    the first step whose evaluation reached the bar (None: none did)."""
    path = os.environ.get("RL_SUITE_LEARNING_RESULTS")
    if path:
        result = dict(
            case=case,
            seed=seed,
            best_return=max(r for _, r in evaluations),
            bar=bar,
            steps=evaluations[-1][0],
            score=score,
            first_at_bar=next((steps for steps, r in evaluations if r >= bar), None),
        )
        with open(path, "a") as f:
            f.write(json.dumps(result) + "\n")


def required_passes(n_seeds):
    """4 of 5 (rounded up for other counts: every seed when fewer than 5)."""
    return n_seeds - n_seeds // 5


def test_cue_memory_env_hides_the_cue_at_the_query():
    env = CueMemoryEnv()
    check_env(env)
    env.seed(0)
    for _ in range(20):
        observation = env.reset()
        cue = int(observation[:N_CUES].argmax())
        assert observation[cue] == 1.0 and observation.sum() == 1.0
        for t in range(1, DELAY + 1):
            observation, reward, done, _ = env.step(cue)
            assert reward == 0.0 and not done
            assert observation[:N_CUES].sum() == 0.0 and observation[-1] == (t == DELAY)
        _, reward, done, _ = env.step(cue)
        assert reward == OPTIMAL and done
        env.reset()
        for _ in range(DELAY):
            env.step(0)
        assert env.step(1 - env.cue).reward == 0.0


@pytest.mark.slow
def test_r2d1_remembers_the_cue(tmp_path):
    held, answers = {}, {}
    for seed in SEEDS:
        evaluations, agent = train("r2d1", seed, tmp_path / "r2d1")
        within = [r for steps, r in evaluations if steps <= STEP_BUDGET]
        held[seed] = min(within[-HELD_EVALS:])
        _record("r2d1-cue-memory", seed, evaluations, BAR, held[seed])
        answers[seed] = answers_with_fixed_prev_action(agent)
    passes = [seed for seed in SEEDS if held[seed] >= BAR]
    assert len(passes) >= required_passes(len(SEEDS)), (
        f"lowest of the last {HELD_EVALS} evaluation returns by seed: {held}, bar {BAR}"
    )
    cues = torch.arange(N_CUES).unsqueeze(1).expand(N_CUES, N_CUES)
    for seed in passes:
        assert torch.equal(answers[seed], cues), (
            f"seed {seed}: greedy answers [cue, forced previous action] {answers[seed].tolist()}"
        )


@pytest.mark.slow
def test_feed_forward_dqn_stays_at_chance(tmp_path):
    worst = {}
    for seed in SEEDS:
        evaluations, _ = train("dqn", seed, tmp_path / "dqn")
        worst[seed] = max(r for _, r in evaluations)
        _record("feed-forward-dqn-cue-memory (must fail)", seed, evaluations, BAR, worst[seed])
    assert max(worst.values()) <= CHANCE_CEILING, (
        f"best evaluation return by seed: {worst}; chance is {CHANCE}"
    )


@pytest.mark.slow
def test_feed_forward_dqn_learns_the_cue_in_view(tmp_path):
    evaluations, _ = train("dqn", SEEDS[0], tmp_path, steps=5 * LOG_INTERVAL, delay=0)
    best = max(r for _, r in evaluations)
    _record("feed-forward-dqn-cue-in-view", SEEDS[0], evaluations, BAR, best)
    assert best >= BAR, f"evaluation returns {evaluations}"
