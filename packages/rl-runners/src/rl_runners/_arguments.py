"""The checks a runner's constructor makes before any work starts (each bad argument named,
with what was expected), and the run's length in iterations."""

from __future__ import annotations

from collections.abc import Mapping

from ._evaluator import EvalAgent, EvalSampler
from ._protocols import SamplerProtocol, missing_methods

__all__ = ["check_affinity", "check_parts", "check_seed", "run_length", "sampler_batch_size"]


def check_parts(
    protocols: tuple[type, type, type],
    algo: object,
    agent: object,
    sampler: object,
    evaluating: bool,
) -> None:
    """The algorithm, the agent and the sampler have their protocols' methods (``evaluating``:
    also those the evaluator calls)."""
    extra: dict[str, tuple[type, ...]] = {}
    if evaluating:
        extra = {"agent": (EvalAgent,), "sampler": (EvalSampler,)}
    parts = (("algo", algo), ("agent", agent), ("sampler", sampler))
    for (role, obj), protocol in zip(parts, protocols, strict=True):
        missing = missing_methods(protocol, obj, extra.get(role, ()))
        if missing:
            raise TypeError(
                f"{role} ({type(obj).__name__}) lacks {', '.join(missing)}; see "
                f"rl_runners.{protocol.__name__}"
            )


def check_seed(seed: object) -> None:
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise ValueError(f"seed must be None or a non-negative int, got {seed!r}")


def check_affinity(affinity: object) -> None:
    if affinity is not None and not isinstance(affinity, Mapping):
        raise TypeError(f"affinity must be a dict or None, got {type(affinity).__name__}")


def sampler_batch_size(sampler: SamplerProtocol) -> int:
    """The environment steps of one sampler batch (``batch_spec.size``)."""
    batch_size = getattr(sampler.batch_spec, "size", None)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(
            f"sampler.batch_spec.size must be a positive int (batch_T * batch_B), "
            f"got {batch_size!r}"
        )
    return batch_size


def run_length(
    n_steps: int | None, itr_batch_size: int, log_interval_steps: int
) -> tuple[int, int]:
    """``(log_interval_itrs, n_itr)``: ``n_itr`` counts ``n_steps`` in sampler batches, rounded
    up to whole log intervals (0 without ``n_steps``)."""
    if n_steps is not None and n_steps < itr_batch_size:
        raise ValueError(
            f"n_steps={n_steps} is less than one sampler batch "
            f"(batch_T * batch_B = {itr_batch_size}): not one iteration would run"
        )
    log_interval_itrs = max(log_interval_steps // itr_batch_size, 1)
    if n_steps is None:
        return log_interval_itrs, 0
    n_itr = n_steps // itr_batch_size
    if n_itr % log_interval_itrs:  # run on to the next log iteration
        n_itr += log_interval_itrs - n_itr % log_interval_itrs
    return log_interval_itrs, n_itr
