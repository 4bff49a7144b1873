"""Optimizers from outside tune_gym, run on the same measured spaces as its agents.

:mod:`benchmarks.external.kernel_tuner_runs` runs Kernel Tuner's own strategies in simulation
mode on a Kernel Tuner cache file and returns each run as a trace (every configuration in the
order Kernel Tuner evaluated it, with its recorded time and the simulated clock).
"""
