"""The exception of a run stopped early on purpose (kept apart: the CLI catches it without
importing the trainer)."""

__all__ = ["RunStopped"]


class RunStopped(Exception):
    """A run stopped before its end by a signal (SIGTERM, SIGUSR1), its snapshot written:
    ``rl-suite resume`` continues it."""
