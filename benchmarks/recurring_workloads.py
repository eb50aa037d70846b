"""The recurring-job benchmarks' setting: Zeus's six workloads, the two GPUs and the targets.

Shared by `recurring.py` (in-sample tables) and `recurring_validation.py` (out of sample), so that
neither imports the other for it.
"""

from __future__ import annotations

from dataclasses import dataclass

GPUS = ("v100", "a40")
ETA, BETA = 0.5, 2.0
#: The issue's targets: cumulative cost relative to the oracle, mean over workloads and worst workload.
TARGET_MEAN, TARGET_MAX = 1.03, 1.06


@dataclass(frozen=True)
class Workload:
    """One of Zeus's traced training jobs, with its usual target metric, epoch limit and batch size."""

    name: str
    target_metric: float
    max_epochs: int
    default_batch_size: int


WORKLOADS = (
    Workload("cifar100/shufflenetv2", 0.6, 100, 1024),
    Workload("imagenet/resnet50", 0.65, 100, 256),
    Workload("squad/bert_base_uncased", 84.0, 6, 32),
    Workload("librispeech/deepspeech2", 40.0, 16, 192),
    Workload("movielens-1m/ncf", 0.41, 100, 1024),
    Workload("sentiment140/bert_base_uncased", 0.84, 10, 128),
)
