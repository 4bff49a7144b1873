"""Whole networks: PyTorch models imported into TVM Relax, their tuning tasks, and end-to-end tuning.

* :mod:`tune_gym.networks.models`: the model definitions (random weights, no downloads);
* :mod:`tune_gym.networks.network`: import, kernel extraction, suite mapping, compilation;
* :mod:`agents.network` (with the agents): every kernel tuned under one budget by a task
  scheduler, ``tune-gym network``;
* :mod:`tune_gym.networks.timing`: end-to-end latency against PyTorch, TVM's default build and
  MetaSchedule's own network tuning.
"""

from tune_gym.networks.network import Network, NetworkTask, import_network, suite_mapping

__all__ = ["Network", "NetworkTask", "import_network", "suite_mapping"]
