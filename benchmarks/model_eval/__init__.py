"""Dataset evaluation of cost models on held-out networks (:mod:`.run`); the metrics are
:mod:`agents.models.metrics`."""
