"""Measurement datasets (Parquet), the catalog of committed ones, and the collector."""

from tune_gym.datasets.dataset import (
    DATASET_SCHEMA,
    MODES,
    Dataset,
    DatasetError,
    load_dataset,
    seal_dataset,
    space_fingerprint,
)

__all__ = ["DATASET_SCHEMA", "MODES", "Dataset", "DatasetError", "load_dataset", "seal_dataset", "space_fingerprint"]
