"""Search agents behind one ask/tell interface (see :mod:`agents.base`)."""

from agents.base import Agent, RunResult, Trial, list_agents, make_agent, register, run

__all__ = ["Agent", "RunResult", "Trial", "list_agents", "make_agent", "register", "run"]
