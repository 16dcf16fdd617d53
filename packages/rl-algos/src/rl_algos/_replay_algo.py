"""What the replay-based algorithms share (DQN, CategoricalDQN, R2D1, DDPG, TD3, SAC): sizing
the run from the sampler's batch, building the replay buffer, the loop of updates on replayed
batches, and saving the replay.

Two ways to start, as in rlpyt: ``initialize`` (synchronous runners: ``optimize_agent(itr,
samples)`` appends the batch, then updates) or ``async_initialize`` (the asynchronous runner:
the replay buffer on shared memory, filled by another process with ``samples_to_buffer``;
``optim_initialize(rank)``, then ``optimize_agent(itr, sampler_itr=...)`` from the replay
alone). ``replay_device`` keeps the replay buffer as tensors on that device, whose batches
the update then takes without a copy (None: numpy on the host). ``compile`` compiles the
losses and, on CUDA, replays each update as a CUDA graph (``_compile``). Details: the package
README, "Replay-based training".
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import torch

from rl_arrays import BatchSpec, numpify_buffer
from rl_replay import BaseNStepReturnBuffer

from ._compile import UpdateSteps, check_compile, check_single_process, make_capturable
from ._pg import check_count, check_number
from ._protocols import DdpgAgentLike, QAgentLike, R2d1AgentLike, SacAgentLike
from ._replay_feed import (
    check_replay_options,
    check_sampler_batch,
    check_shareable,
    make_replay_buffer,
    stored_example,
    stored_samples,
)
from ._replay_updates import (
    batch_on_device,
    check_learning_start,
    opt_info_out,
    replayed_batches,
    updates_per_optimize,
)

__all__ = ["ReplayAlgo", "check_agent", "check_positive"]

# The agent an algorithm trains; what ReplayAlgo itself reads (device, update_target), all
# of them have.
AgentT = TypeVar("AgentT", bound=QAgentLike | R2d1AgentLike | DdpgAgentLike | SacAgentLike)
ValueT = TypeVar("ValueT")


def check_positive(name: str, value: Any) -> None:
    check_number(name, value, 0)
    if value == 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")


def check_agent(agent: object, algo: str, members: tuple[str, ...], protocol: str) -> None:
    missing = [name for name in members if not hasattr(agent, name)]
    if missing or not callable(agent):
        raise TypeError(
            f"{algo} needs an agent that is callable and has {', '.join(members)} (see "
            f"rl_algos.{protocol}); missing: {', '.join(missing) or '__call__'}"
        )


def _check_optimizer_options(
    OptimCls: Callable[..., torch.optim.Optimizer],
    optim_kwargs: dict[str, Any] | None,
    clip_grad_norm: float | None,
) -> None:
    if not callable(OptimCls):
        raise ValueError(f"OptimCls must be an optimizer class, got {OptimCls!r}")
    if optim_kwargs is not None and not isinstance(optim_kwargs, dict):
        raise ValueError(f"optim_kwargs must be a dict or None, got {optim_kwargs!r}")
    if clip_grad_norm is not None:
        check_number("clip_grad_norm", clip_grad_norm, 0)


def _not_ready(algo: str, initialized: bool) -> RuntimeError:
    """The error for a use before the set-up it needs: ``initialize`` (or
    ``async_initialize``), or after ``async_initialize`` still ``optim_initialize``."""
    if not initialized:
        return RuntimeError(
            f"{algo}.initialize(agent, ...) (or async_initialize) must be called first"
        )
    return RuntimeError(
        f"{algo}.optim_initialize() must be called first: async_initialize() builds "
        "no optimizer (call it in the optimizer's process)"
    )


class ReplayAlgo(Generic[AgentT]):
    """Base of the replay-based algorithms (see the module). Subclasses give the agent check
    (``agent_members`` / ``_check_agent``), what the agent is told of the schedule
    (``_tell_agent``), the default replay class, the optimizers (``_make_optimizers``,
    ``_optimizers``), the losses to compile (``_compile_losses``) and one update on a replayed
    batch: ``_variant`` (what this update does besides the critic's step, as a tuple of
    bools), ``_update_step`` (the update itself: tensors in, tensors out, nothing read on the
    host nor changed in Python, so that it can be replayed as a CUDA graph) and ``_record``
    (its outputs into the diagnostics)."""

    bootstrap_value = False  # the sampler need not record a bootstrap value
    OptInfoCls: Any
    opt_info_fields: tuple[str, ...]
    agent_members: tuple[str, ...] = ()
    agent_protocol = ""

    def __init__(
        self,
        discount: float,
        batch_size: int,
        min_steps_learn: int,
        replay_size: int,
        replay_ratio: float,
        target_update_tau: float,
        target_update_interval: int,
        n_step_return: int,
        OptimCls: Callable[..., torch.optim.Optimizer],
        optim_kwargs: dict[str, Any] | None,
        initial_optim_state_dict: dict[str, Any] | None,
        clip_grad_norm: float | None,
        updates_per_sync: int,
        bootstrap_timelimit: bool,
        ReplayBufferCls: Callable[..., BaseNStepReturnBuffer] | None,
        replay_device: torch.device | str | None = None,
        compile: bool | dict[str, Any] = False,
    ):
        check_number("discount", discount, 0, 1)
        self.discount = discount
        self.batch_size = check_count("batch_size", batch_size)
        self.min_steps_learn = check_count("min_steps_learn", min_steps_learn, 0)
        self.replay_size = check_count("replay_size", replay_size)
        check_positive("replay_ratio", replay_ratio)
        self.replay_ratio = replay_ratio
        check_positive("target_update_tau", target_update_tau)
        check_number("target_update_tau", target_update_tau, 0, 1)
        self.target_update_tau = target_update_tau
        self.target_update_interval = check_count("target_update_interval", target_update_interval)
        self.n_step_return = check_count("n_step_return", n_step_return)
        _check_optimizer_options(OptimCls, optim_kwargs, clip_grad_norm)
        self.updates_per_sync = check_count("updates_per_sync", updates_per_sync)
        check_replay_options(ReplayBufferCls, replay_device)
        self.OptimCls = OptimCls
        if optim_kwargs is None and OptimCls in (torch.optim.Adam, torch.optim.AdamW):
            optim_kwargs = self._default_adam_kwargs()
        self.optim_kwargs = dict(optim_kwargs or {})
        self.initial_optim_state_dict = initial_optim_state_dict
        self.clip_grad_norm = clip_grad_norm
        self.bootstrap_timelimit = bool(bootstrap_timelimit)
        self.ReplayBufferCls = ReplayBufferCls
        self.replay_device = replay_device
        self.compile = compile
        self._compile_options = check_compile(compile)
        self.agent: AgentT | None = None
        self.replay_buffer: BaseNStepReturnBuffer | None = None
        self.update_counter = 0
        self.async_ = False  # set by async_initialize: optimize_agent may then get no samples

    def _default_adam_kwargs(self) -> dict[str, Any]:
        return {"fused": True}  # one kernel for every parameter where the default loops

    # ------------------------------------------------------------------ set-up

    def initialize(
        self,
        agent: AgentT,
        n_itr: int,
        batch_spec: BatchSpec,
        mid_batch_reset: bool = False,
        examples: Any = None,
        world_size: int = 1,
        rank: int = 0,
    ) -> None:
        """Keep the agent, size the run from ``batch_spec`` (``updates_per_optimize``,
        ``min_itr_learn``, told to the agent), build the replay buffer from ``examples`` (one
        step of each field, as the sampler returns them) and the optimizers.

        ``mid_batch_reset=False`` is accepted, but a wait-reset sampler's blank steps after a
        done are then replayed as terminal transitions with zero reward (as in rlpyt)."""
        rank = check_count("rank", rank, 0)
        self._setup(agent, n_itr, batch_spec, mid_batch_reset, examples, world_size, False)
        self.updates_per_optimize = updates_per_optimize(
            self.replay_ratio, self.sampler_bs, self.batch_size
        )
        self.optim_initialize(rank)

    def async_initialize(
        self,
        agent: AgentT,
        sampler_n_itr: int,
        batch_spec: BatchSpec,
        mid_batch_reset: bool,
        examples: Any,
        world_size: int = 1,
    ) -> BaseNStepReturnBuffer:
        """For the asynchronous runner, in the training process before its other processes
        start: as ``initialize`` but with the replay buffer on shared memory (built with
        ``shared_memory=True``, returned for the memory copier) and no optimizer yet
        (``optim_initialize``). Each ``optimize_agent`` then takes ``updates_per_sync`` updates."""
        check_shareable(self.replay_device)
        self._setup(agent, sampler_n_itr, batch_spec, mid_batch_reset, examples, world_size, True)
        self.updates_per_optimize = self.updates_per_sync
        return self._replay_buffer

    def _setup(
        self,
        agent: AgentT,
        n_itr: int,
        batch_spec: BatchSpec,
        mid_batch_reset: bool,
        examples: Any,
        world_size: int,
        async_: bool,
    ) -> None:
        """What both initializations do: checks, sizes, the agent's schedule, the replay."""
        self._check_agent(agent)
        n_itr = check_count("sampler_n_itr" if async_ else "n_itr", n_itr)
        world_size = check_count("world_size", world_size)
        check_single_process(self._compile_options, world_size)
        T, B = check_sampler_batch(batch_spec, examples)
        self.agent = agent
        self.n_itr = n_itr
        self.batch_spec = batch_spec
        self.mid_batch_reset = bool(mid_batch_reset)
        self.world_size = world_size
        self.async_ = async_
        self.sampler_bs = T * B
        self.min_itr_learn = self.min_steps_learn // self.sampler_bs
        self.learn_from_itr = self.min_itr_learn  # (later after a resume without the replay)
        self._tell_agent(agent)
        self.initialize_replay_buffer(examples, batch_spec, async_=async_)
        check_learning_start(
            self.min_steps_learn, self.min_itr_learn, T, B, self._steps_to_first_batch()
        )

    def _check_agent(self, agent: object) -> None:
        check_agent(agent, type(self).__name__, self.agent_members, self.agent_protocol)

    def _tell_agent(self, agent: AgentT) -> None:
        """Give the agent what it schedules by sampler iteration (e.g. ``min_itr_learn``)."""
        raise NotImplementedError

    def optim_initialize(self, rank: int = 0) -> None:
        """Build the optimizers (in the optimizer's process, for the asynchronous runner)
        and load ``initial_optim_state_dict`` when given."""
        rank = check_count("rank", rank, 0)
        self._agent  # noqa: B018 (raises unless initialized)
        self.rank = rank
        self._make_optimizers()
        graphs = self._compile_options is not None and self._device.type == "cuda"
        if graphs:
            make_capturable(list(self._optimizers().values()), type(self).__name__)
        self._compile_losses(self._compile_options)
        self._steps = UpdateSteps(self._update_step, type(self).__name__, graphs)
        if self.initial_optim_state_dict is not None:
            self.load_optim_state_dict(self.initial_optim_state_dict)

    def _compile_losses(self, options: dict[str, Any] | None) -> None:
        """Set the loss functions ``_update_step`` calls, compiled with ``options`` (None:
        as they are)."""
        raise NotImplementedError

    def _restart_steps(self) -> None:
        """After the optimizers' state was replaced: captured steps would use the old one."""
        steps = getattr(self, "_steps", None)
        if steps is not None:
            steps.restart(list(self._optimizers().values()))

    def _make_optimizers(self) -> None:
        raise NotImplementedError

    def _optimizers(self) -> dict[str, torch.optim.Optimizer]:
        """The optimizers by their name in ``optim_state_dict``."""
        raise NotImplementedError

    def optim_state_dict(self) -> dict[str, Any]:
        """A copy of what resuming needs besides the agent and the replay buffer."""
        raise NotImplementedError

    def load_optim_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what :meth:`optim_state_dict` returned."""
        raise NotImplementedError

    def initialize_replay_buffer(
        self, examples: Any, batch_spec: BatchSpec, async_: bool = False
    ) -> None:
        """The replay buffer, sized ``replay_size`` over ``batch_spec.B`` environments, seeded
        from torch's generator (so a seeded run replays the same batches); with ``async_`` on
        shared memory (``ReplayBufferCls``, when given, must then make shared buffers); on
        ``replay_device`` when set (passed to the class as ``device``)."""
        self.replay_buffer = make_replay_buffer(
            self.ReplayBufferCls,
            self._default_replay_cls,
            async_,
            self.replay_device,
            example=numpify_buffer(self.examples_to_buffer(examples)),
            size=self.replay_size,
            B=batch_spec.B,
            discount=self.discount,
            n_step_return=self.n_step_return,
            seed=int(torch.randint(2**62, ())),
            **self._replay_kwargs(),
        )

    def _replay_kwargs(self) -> dict[str, Any]:
        return {}

    def _default_replay_cls(self, example: Any) -> type[BaseNStepReturnBuffer]:
        """The buffer class for steps like ``example`` when no ``ReplayBufferCls`` is given."""
        raise NotImplementedError

    def _steps_to_first_batch(self) -> int:
        """Steps per environment the replay buffer needs before it can give a batch."""
        off_forward = getattr(self.replay_buffer, "off_forward", 1)
        return off_forward + self.n_step_return + math.ceil(self.batch_size / self.batch_spec.B)

    # ------------------------------------------------------------------ data

    def examples_to_buffer(self, examples: Any) -> Any:
        """One step of what the replay buffer stores, from the sampler's examples."""
        return stored_example(examples, self.bootstrap_timelimit)

    def samples_to_buffer(self, samples: Any) -> Any:
        """What the replay buffer stores from a ``[T, B]`` batch of samples (numpy; with
        ``replay_device``, tensors stay where they are: the buffer copies them once). Reads
        only the samples and the settings: in async mode it runs in the memory copier."""
        return stored_samples(samples, self.bootstrap_timelimit, self.replay_device is None)

    # ------------------------------------------------------------------ training

    def optimize_agent(self, itr: int, samples: Any = None, sampler_itr: int | None = None) -> Any:
        """Store ``samples`` (when given), then, from sampler iteration ``learn_from_itr``
        on, take ``updates_per_optimize`` updates on replayed batches. Returns the OptInfo of
        lists (floats; with ``compile``, 1-D tensors on the device), empty before learning
        starts. Async use: ``sampler_itr`` is the sampler's iteration, which the learning
        start and schedules count in; ``samples=None`` (train from the replay alone) needs
        ``async_initialize``."""
        buffer = self._replay_buffer
        if samples is None and not self.async_:
            raise ValueError(
                f"{type(self).__name__}.optimize_agent(itr, samples=None) trains from the "
                "replay buffer alone, as the asynchronous runner does after async_initialize; "
                "after initialize, pass the sampler's samples"
            )
        itr = itr if sampler_itr is None else sampler_itr
        if samples is not None:
            buffer.append_samples(self.samples_to_buffer(samples))
        opt_info = self.OptInfoCls(*([] for _ in self.OptInfoCls._fields))
        if itr < self.learn_from_itr:
            return opt_info
        self._optimizers()  # (raises unless optim_initialize ran)
        batches = replayed_batches(
            buffer,
            self.updates_per_optimize,
            self._replay_batch_B(),
            self._to_device,
            self._updates_per_draw,
            self._prepare_draw,
        )
        for batch in batches:
            self.update_counter += 1
            self._update(batch, opt_info, self.update_counter % self.target_update_interval == 0)
        self.update_itr_hyperparams(itr)
        return opt_info_out(opt_info, self._compile_options is not None)

    def _updates_per_draw(self) -> int:
        """The most updates whose batches may be drawn together from now on (see
        ``replayed_batches``)."""
        return sys.maxsize

    def _prepare_draw(self, draw: Any, batch_B: int) -> Any:
        """What the updates get, batch by batch, of a draw of replayed batches (of
        ``batch_B`` rows each): the draw itself here; a subclass may add what is cheaper
        computed for all of them at once."""
        return draw

    def _update(self, batch: Any, opt_info: Any, update_target: bool = False) -> None:
        """One update on a replayed batch, recorded in ``opt_info``."""
        variant = self._variant(update_target)
        self._record(variant, self._steps(variant, batch), opt_info)

    def _variant(self, update_target: bool) -> tuple[bool, ...]:
        """What the next update does (its ``_update_step`` variant): here, whether it moves
        the target networks."""
        return (update_target,)

    def _update_step(self, variant: tuple[bool, ...], batch: Any) -> tuple[Any, ...]:
        """One update on a replayed batch; returns its diagnostics (tensors)."""
        raise NotImplementedError

    def _record(self, variant: tuple[bool, ...], outputs: tuple[Any, ...], opt_info: Any) -> None:
        """Append an update's diagnostics (``_update_step``'s outputs) to ``opt_info``."""
        raise NotImplementedError

    def _replay_batch_B(self) -> int:
        return self.batch_size

    def _to_device(self, batch: Any) -> Any:
        """A replayed batch on the agent's device: as it is when the buffer gathered it there
        (``replay_device``), else converted to tensors and copied."""
        return batch_on_device(batch, self.replay_buffer, self._device)

    def update_itr_hyperparams(self, itr: int) -> None:
        """Schedules by sampler iteration (none here)."""

    # ------------------------------------------------------------------ state

    def save_replay(self, path: str | os.PathLike[str]) -> None:
        """Write the replay buffer's whole state to ``path`` (.npz, written atomically)."""
        self._replay_buffer.save(path)

    def load_replay(self, path: str | os.PathLike[str]) -> None:
        """Restore the replay buffer saved by :meth:`save_replay` (same settings)."""
        self._replay_buffer.load(path)

    def replay_started_empty(self, itr: int) -> None:
        """A run resumed at sampler iteration ``itr`` without its replay buffer: learning
        waits again, as at the start of a run, until ``min_steps_learn`` new steps fill it
        (updates on a few steps would overfit them, or fail to draw a batch)."""
        self.learn_from_itr = itr + self.min_itr_learn

    # ------------------------------------------------------------------ guards

    def _require(self, value: ValueT | None) -> ValueT:
        if value is None:
            raise _not_ready(type(self).__name__, initialized=self.agent is not None)
        return value

    @property
    def _agent(self) -> AgentT:
        return self._require(self.agent)

    @property
    def _device(self) -> torch.device:
        return self._agent.device

    @property
    def _replay_buffer(self) -> BaseNStepReturnBuffer:
        return self._require(self.replay_buffer)
