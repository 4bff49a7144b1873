"""Search agents behind one ask/tell interface (see :mod:`agents.base`)."""

from agents.base import Agent, NotApplicable, RunResult, list_agents, make_agent, register, run, unavailable_agents

__all__ = ["Agent", "NotApplicable", "RunResult", "list_agents", "make_agent", "register", "run", "unavailable_agents"]
