"""Replay buffers against stable-baselines3's ReplayBuffer, and the sum tree against plain numpy.

    python benchmarks/replay.py           # full run: about a minute, up to 3 GB of memory
    python benchmarks/replay.py --quick   # seconds; checks it still works, the numbers mean nothing

(a) Atari-shaped data: uint8 observations [4, 84, 84] (4 stacked frames, oldest to newest), 8
    environments, 100k transitions. ``rl_replay.UniformReplayFrameBuffer`` (appended with T=1, the
    granularity of SB3's per-step ``add``, and with T=4, a typical sampler batch) against SB3's
    ``ReplayBuffer(optimize_memory_usage=True)``: append throughput, ``sample(32)`` throughput (both
    ending in torch tensors: ours through ``rl_arrays.torchify_buffer``) and resident memory.
(b) The same for a small vector observation (float32 [8]) with ``rl_replay.UniformReplayBuffer``.
(c) ``rl_replay.SumTree``: sample 32 + update their 32 priorities, against a plain numpy priority
    array (``np.random.choice(N, 32, p=p / p.sum())``; ``p[idx] = new``), at 1e5 and 1e6 leaves.

Both buffers of a comparison are fed the same generated data (same seed): random frames, a done
with probability 0.01 per step, after which the environment's next observation has zeros for
history and only its newest frame. Each buffer is measured in its own process (Linux: the
memory figure reads /proc/self/status), where resident memory is the growth of VmRSS from before the
buffer is made to after it is full; the bytes of the distinct numpy arrays it holds are printed too.
Throughputs are the best of several repeats (time.perf_counter); append throughput is the best of
several passes over the whole capacity, the first one into fresh memory. A sample is timed with
torch's default threads and again with one (SB3 copies into tensors with torch's threads, which a
busy machine slows most; ours wraps numpy arrays without copying). Our batch holds more than
SB3's: the previous action and reward of both the observation and the target one. The load
average printed before and after says whether the machine was quiet: compare only quiet runs.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch  # imported before any RSS baseline, by both sides alike
from gymnasium import spaces
from stable_baselines3.common.buffers import ReplayBuffer

from rl_arrays import torchify_buffer
from rl_replay import SamplesToBuffer, SumTree, UniformReplayBuffer, UniformReplayFrameBuffer

B = 8  # environments
BATCH = 32  # transitions per sample
DONE_PROB = 0.01
CHUNK = 64  # env steps generated at a time, outside the timed region (a multiple of every T)
SEED = 0


@dataclass(frozen=True)
class Sizes:
    capacity: int  # transitions, all environments together
    passes: int  # timed append passes over the whole capacity
    repeats: int  # timed repeats of a throughput measurement
    min_time: float  # seconds each throughput repeat lasts at least
    tree_leaves: tuple[int, ...]


FULL = Sizes(capacity=100_000, passes=3, repeats=5, min_time=0.2, tree_leaves=(10**5, 10**6))
QUICK = Sizes(capacity=8 * CHUNK, passes=1, repeats=1, min_time=0.0, tree_leaves=(1024, 8192))


@dataclass(frozen=True)
class Data:
    """The shape of one comparison's data."""

    name: str
    obs_shape: tuple[int, ...]
    obs_dtype: type
    n_actions: int
    frames: bool  # stacked frames (a new observation shifts in one frame) or a fresh vector

    def observation_space(self) -> spaces.Box:
        if self.frames:
            return spaces.Box(0, 255, self.obs_shape, self.obs_dtype)
        return spaces.Box(-np.inf, np.inf, self.obs_shape, self.obs_dtype)

    def example(self) -> Any:
        return SamplesToBuffer(
            observation=np.zeros(self.obs_shape, self.obs_dtype),
            action=np.int64(0),
            reward=np.float32(0),
            done=False,
        )


ATARI = Data("Atari frames", (4, 84, 84), np.uint8, n_actions=6, frames=True)
VECTOR = Data("vector", (8,), np.float32, n_actions=4, frames=False)


# ---------------------------------------------------------------------------------- data


@dataclass
class Chunk:
    """K steps of B environments: observation [K + 1, B, ...] (the last is the next step's)."""

    observation: np.ndarray
    action: np.ndarray
    reward: np.ndarray
    done: np.ndarray


class FakeEnvs:
    """B environments emitting random data; a deterministic stream for a given seed."""

    def __init__(self, data: Data, seed: int) -> None:
        self.data = data
        self.rng = np.random.default_rng(seed)
        self.observation = self._new_observations(np.ones(B, bool), None)
        # Reused by every chunk, so that making data adds nothing to a buffer's resident memory.
        self._observations = np.empty((CHUNK + 1, B, *data.obs_shape), data.obs_dtype)

    def _new_observations(self, done: np.ndarray, previous: np.ndarray | None) -> np.ndarray:
        """Stacked frames shift in one new frame, with zero history where the env was reset."""
        shape = (B, *self.data.obs_shape)
        if not self.data.frames:
            return self.rng.standard_normal(shape, np.float32)
        obs = np.zeros(shape, np.uint8)
        if previous is not None:
            obs[:, :-1] = previous[:, 1:]
            obs[done, :-1] = 0
        obs[:, -1] = self.rng.integers(0, 256, (B, *shape[2:]), np.uint8)
        return obs

    def chunk(self, K: int) -> Chunk:
        """The next K <= CHUNK steps; its observations are overwritten by the next chunk."""
        observation = self._observations[: K + 1]
        observation[0] = self.observation
        done = self.rng.random((K, B)) < DONE_PROB
        for k in range(K):
            observation[k + 1] = self._new_observations(done[k], observation[k])
        self.observation = observation[K].copy()
        action = self.rng.integers(0, self.data.n_actions, (K, B))
        reward = self.rng.choice(np.array([-1, 0, 1], np.float32), (K, B))
        return Chunk(observation, action, reward, done)


# ---------------------------------------------------------------------------------- buffers


class Sb3Side:
    """stable-baselines3's ReplayBuffer, fed one env step per add (its API)."""

    label = "SB3"

    def __init__(self, data: Data, capacity: int) -> None:
        self.buffer = ReplayBuffer(
            capacity,
            data.observation_space(),
            spaces.Discrete(data.n_actions),
            device="cpu",
            n_envs=B,
            optimize_memory_usage=True,
            handle_timeout_termination=False,
        )
        self.infos: list[dict] = [{} for _ in range(B)]

    def prepare(self, c: Chunk) -> list[tuple]:
        return [
            (
                c.observation[k],
                c.observation[k + 1],
                c.action[k],
                c.reward[k],
                c.done[k],
                self.infos,
            )
            for k in range(len(c.action))
        ]

    def append(self, item: tuple) -> None:
        self.buffer.add(*item)

    def sample(self) -> Any:
        return self.buffer.sample(BATCH)


class OurSide:
    """rl_replay's uniform buffer (the frame buffer for stacked frames), appended T steps a time."""

    def __init__(self, data: Data, capacity: int, T: int) -> None:
        cls = UniformReplayFrameBuffer if data.frames else UniformReplayBuffer
        self.buffer = cls(data.example(), size=capacity, B=B, discount=0.99, n_step_return=1)
        self.T = T
        self.label = f"ours T={T}"

    def prepare(self, c: Chunk) -> list[Any]:
        samples = SamplesToBuffer(
            observation=c.observation[:-1], action=c.action, reward=c.reward, done=c.done
        )
        return [samples[t : t + self.T] for t in range(0, len(c.action), self.T)]

    def append(self, item: Any) -> None:
        self.buffer.append_samples(item)

    def sample(self) -> Any:
        return torchify_buffer(self.buffer.sample_batch(batch_B=BATCH))


# ---------------------------------------------------------------------------------- measuring


def rss_bytes() -> int:
    with open("/proc/self/status") as f:
        line = next(line for line in f if line.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024


def best_rate(func: Callable[[], object], sizes: Sizes) -> float:
    """Calls per second, the best of `sizes.repeats` runs of n calls lasting >= min_time each."""
    n = 1
    while (elapsed := timed_calls(func, n)) < sizes.min_time:
        n *= 2
    rates = [n / elapsed] + [n / timed_calls(func, n) for _ in range(sizes.repeats - 1)]
    return max(rates)


def timed_calls(func: Callable[[], object], n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        func()
    return time.perf_counter() - start


def append_pass(side: Sb3Side | OurSide, envs: FakeEnvs, steps: int) -> float:
    """Append `steps` env steps (all B envs) and return transitions per second.

    Data is generated a chunk at a time, outside the timed region."""
    elapsed = 0.0
    for start in range(0, steps, CHUNK):
        items = side.prepare(envs.chunk(min(CHUNK, steps - start)))
        t0 = time.perf_counter()
        for item in items:
            side.append(item)
        elapsed += time.perf_counter() - t0
    return steps * B / elapsed


def arrays_held(obj: object) -> dict[str, np.ndarray]:
    """The distinct numpy arrays reachable from the buffer's attributes, by first path found.

    A view is counted by its base array, once. Only the buffer object itself and objects of
    rl_replay / rl_arrays / stable_baselines3 are searched (not, e.g., gymnasium spaces).
    """
    found: dict[int, tuple[str, np.ndarray]] = {}
    seen: set[int] = set()

    def visit(x: object, path: str) -> None:
        if id(x) in seen:
            return
        seen.add(id(x))
        if isinstance(x, np.ndarray):
            base = x
            while isinstance(base.base, np.ndarray):
                base = base.base
            found.setdefault(id(base), (path, base))
        elif isinstance(x, dict):
            for key, value in x.items():
                visit(value, f"{path}[{key!r}]")
        elif isinstance(x, tuple | list):
            fields = getattr(x, "_fields", None) or range(len(x))
            for field, value in zip(fields, x, strict=False):
                visit(value, f"{path}.{field}")
        elif x is obj or type(x).__module__.split(".")[0] in _SEARCHED:
            for key, value in vars(x).items():
                visit(value, f"{path}.{key}" if path else key)

    visit(obj, "")
    return {path: array for path, array in found.values()}


_SEARCHED = {"rl_replay", "rl_arrays", "stable_baselines3"}


@dataclass
class BufferResult:
    label: str
    append_rate: float  # transitions/s
    sample_rate: float  # batches/s
    sample_rate_1_thread: float  # batches/s with torch.set_num_threads(1)
    rss_growth: int  # bytes
    arrays: dict[str, tuple[tuple[int, ...], str, int]]  # path: (shape, dtype, nbytes)


def measure_buffer(side_name: str, data: Data, T: int, sizes: Sizes) -> BufferResult:
    """Make one buffer, fill it, time appends and samples; meant to run in its own process."""
    FakeEnvs(data, SEED + 1).chunk(CHUNK)  # warm up the allocator with a chunk's temporaries
    envs = FakeEnvs(data, SEED)  # the same stream for every buffer
    steps = sizes.capacity // B
    before = rss_bytes()
    side = Sb3Side(data, sizes.capacity) if side_name == "sb3" else OurSide(data, sizes.capacity, T)
    rates = [append_pass(side, envs, steps)]
    rss_growth = rss_bytes() - before
    rates += [append_pass(side, envs, steps) for _ in range(sizes.passes - 1)]
    sample_rate = best_rate(side.sample, sizes)
    # SB3 copies into tensors with torch's threads, which suffer most from a busy machine.
    torch.set_num_threads(1)
    sample_rate_1_thread = best_rate(side.sample, sizes)
    arrays = {
        path: (a.shape, str(a.dtype), a.nbytes) for path, a in arrays_held(side.buffer).items()
    }
    return BufferResult(
        side.label, max(rates), sample_rate, sample_rate_1_thread, rss_growth, arrays
    )


def in_fresh_process(func: Callable[..., BufferResult], *args: object) -> BufferResult:
    """Run func in a new child process, so that the memory it measures is its own.

    Children fork from a forkserver that imported the heavy modules once (quick), and never
    from this process: a fork after torch has started its threads can deadlock in the child.
    """
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["torch", "stable_baselines3.common.buffers", "rl_replay"])
    with ProcessPoolExecutor(1, mp_context=context) as pool:
        return pool.submit(func, *args).result()


# ---------------------------------------------------------------------------------- sum tree


def sum_tree_rate(leaves: int, sizes: Sizes) -> float:
    T = leaves // B
    tree = SumTree(T, B, off_backward=1, off_forward=1)
    # Turn every slot on at the default priority, as in a full buffer (all but the rows around
    # the cursor). One advance may cover at most T - off_backward - off_forward rows, so two.
    tree.advance(T // 2)
    tree.advance(T - T // 2)

    def step() -> None:
        tree.sample(BATCH)
        tree.update_batch_priorities(np.random.rand(BATCH) + 0.1)

    return best_rate(step, sizes)


def numpy_reference_rate(leaves: int, sizes: Sizes) -> float:
    p = np.ones(leaves)

    def step() -> None:
        idx = np.random.choice(leaves, BATCH, p=p / p.sum())
        p[idx] = np.random.rand(BATCH) + 0.1

    return best_rate(step, sizes)


# ---------------------------------------------------------------------------------- printing


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b else "-"


def print_buffer_table(data: Data, size: int, ours: list[BufferResult], sb3: BufferResult) -> None:
    shape = "x".join(map(str, data.obs_shape))
    print(
        f"\n({'a' if data.frames else 'b'}) {data.name}: {np.dtype(data.obs_dtype)} observation "
        f"[{shape}], Discrete({data.n_actions}), B={B} envs, {size:,} transitions"
    )
    columns = [r.label for r in ours] + [sb3.label] + [f"{r.label}/SB3" for r in ours]
    header = f"{'':<34}" + "".join(f"{c:>14}" for c in columns)
    print(header)
    print("-" * len(header))
    rows: list[tuple[str, Callable[[BufferResult], float], str]] = [
        ("append, transitions/s", lambda r: r.append_rate, ",.0f"),
        (f"sample {BATCH} -> torch, batches/s", lambda r: r.sample_rate, ",.0f"),
        ("  the same, 1 torch thread", lambda r: r.sample_rate_1_thread, ",.0f"),
        ("resident (RSS growth), MiB", lambda r: r.rss_growth / 2**20, ",.1f"),
        ("array nbytes, MiB", lambda r: sum(a[2] for a in r.arrays.values()) / 2**20, ",.1f"),
    ]
    for name, get, fmt in rows:
        values = [get(r) for r in [*ours, sb3]]
        cells = [format(v, fmt) for v in values] + [ratio(v, values[-1]) for v in values[:-1]]
        print(f"{name:<34}" + "".join(f"{c:>14}" for c in cells))
    if data.frames:
        mem = ours[0].rss_growth / sb3.rss_growth
        speed = ours[0].sample_rate / sb3.sample_rate
        print(
            f"targets (issue): frame buffer memory <= 0.3x SB3's (now {mem:.2f}x: "
            f"{'met' if mem <= 0.3 else 'NOT met'}); sample throughput >= 2x SB3's "
            f"(now {speed:.2f}x: {'met' if speed >= 2 else 'NOT met'})"
        )
    for result in [*ours, sb3]:
        print(f"  arrays held by {result.label}:")
        for path, (shape_, dtype, nbytes) in result.arrays.items():
            print(f"    {path:<40}{shape_!s:<26}{dtype:<9}{nbytes / 2**20:>10.2f} MiB")


def print_tree_table(sizes: Sizes) -> None:
    print(f"\n(c) prioritized: sample({BATCH}) + update_batch_priorities({BATCH}), B={B}")
    header = f"{'leaves':>12}{'SumTree, it/s':>16}{'numpy p, it/s':>16}{'SumTree/numpy':>15}"
    print(header)
    print("-" * len(header))
    ratios = {}
    for leaves in sizes.tree_leaves:
        ours, reference = sum_tree_rate(leaves, sizes), numpy_reference_rate(leaves, sizes)
        ratios[leaves] = ours / reference
        print(f"{leaves:>12,}{ours:>16,.0f}{reference:>16,.0f}{ours / reference:>15.1f}")
    top = max(sizes.tree_leaves)
    print(
        f"target (issue): >= 10x the plain reference at 1e6 leaves (now {ratios[top]:.1f}x at "
        f"{top:,}: {'met' if ratios[top] >= 10 else 'NOT met'})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a few seconds, no timing claims")
    args = parser.parse_args()
    sizes = QUICK if args.quick else FULL
    if args.quick:
        print("--quick: tiny sizes and single repeats; these numbers mean nothing.")
    print(
        f"Throughputs: best of {sizes.repeats} repeats (append: best of {sizes.passes} passes "
        "over the capacity); memory: VmRSS growth while making and filling the buffer, each "
        "buffer in its own process."
    )
    print_load("before")
    for data in (ATARI, VECTOR):
        ours = [in_fresh_process(measure_buffer, "ours", data, T, sizes) for T in (1, 4)]
        sb3 = in_fresh_process(measure_buffer, "sb3", data, 1, sizes)
        print_buffer_table(data, sizes.capacity, ours, sb3)
    print_tree_table(sizes)
    print_load("after")


def print_load(when: str) -> None:
    """Other processes skew every figure, SB3's sample most: torch copies with all cores."""
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"load average {when}: {load} (1, 5, 15 min) on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
