"""The one place in the runners that switches the agent's mode."""

from __future__ import annotations

from typing import Protocol

__all__ = ["AgentModes", "ModalAgent"]


class ModalAgent(Protocol):
    """An agent with ``<mode>_mode(itr)`` for each mode it is switched to: ``train`` in every
    runner, ``sample`` in the synchronous ones, ``eval`` by an evaluator."""

    def train_mode(self, itr: int) -> None: ...


class AgentModes:
    """Switches ``agent`` to ``"sample"``, ``"train"`` or ``"eval"`` mode for an iteration;
    a switch to the mode and iteration it is already in is skipped."""

    def __init__(self, agent: ModalAgent):
        self.agent = agent
        self.current: tuple[str, int] | None = None

    def switch(self, mode: str, itr: int) -> None:
        if self.current != (mode, itr):
            getattr(self.agent, f"{mode}_mode")(itr)
            self.current = (mode, itr)
