"""A small made-up trace in the Alibaba GPU trace's CSV format, for ``simulate --sample``.

An installed package has no ../shared/data, so ``simulate`` had nothing to run on. ``write_sample`` writes a
node list and a pod list of the trace's columns into a folder, and ``simulate`` reads them with the same
loader as the real trace. The shapes follow the trace's kinds (8-GPU and 2-GPU machines; CPU-only pods, pods
sharing a GPU, whole-GPU pods of 1 to 8 GPUs; LS and BE QoS), drawn from a seeded generator: this is a sample
to try the command on, not the trace, and its figures say nothing about the trace's.
"""

from __future__ import annotations

import csv
import random
from pathlib import Path

SAMPLE_NODES = "sample-nodes.csv"
SAMPLE_PODS = "sample-pods.csv"
# (model, GPUs, CPU millicores, memory MiB, count)
NODE_MIX = (("V100M32", 8, 96_000, 393_216, 12), ("T4", 2, 64_000, 262_144, 12), ("P100", 2, 64_000, 262_144, 8))
# (upper bound out of 100, GPUs, GPU millicores per GPU): CPU-only, sharing one GPU, whole GPUs
POD_MIX = ((15, 0, 0), (55, 1, 250), (60, 1, 500), (88, 1, 1000), (95, 2, 1000), (98, 4, 1000), (100, 8, 1000))
POD_COLUMNS = (
    "name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "qos", "pod_phase", "creation_time",
    "deletion_time", "scheduled_time",
)  # fmt: skip


def write_sample(folder: Path, *, pods: int = 600, seed: int = 0) -> tuple[Path, Path]:
    """The node list and the pod list, written into ``folder``; their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    nodes_path, pods_path = folder / SAMPLE_NODES, folder / SAMPLE_PODS
    with nodes_path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(("sn", "cpu_milli", "memory_mib", "gpu", "model"))
        number = 0
        for model, gpus, cpu, memory, count in NODE_MIX:
            for _ in range(count):
                writer.writerow((f"sample-node-{number:04d}", cpu, memory, gpus, model))
                number += 1
    with pods_path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(POD_COLUMNS)
        created = 0
        for number in range(pods):
            bucket = rng.randrange(100)
            gpus, gpu_milli = next((g, m) for bound, g, m in POD_MIX if bucket < bound)
            cpu = rng.choice((2_000, 4_000, 8_000, 16_000)) * max(1, gpus)
            memory = rng.choice((8_192, 16_384, 32_768)) * max(1, gpus)
            created += rng.randrange(1, 600)
            qos = "LS" if rng.random() < 0.7 else "BE"
            row = (f"sample-pod-{number:04d}", cpu, memory, gpus, gpu_milli, "", qos, "Running", created, "", created)
            writer.writerow(row)
    return nodes_path, pods_path
