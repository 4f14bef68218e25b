"""docs/labels.md is the codec's: generated from the keys it publishes, and those keys are every key it writes.

Every label and annotation the encoder writes on every fixture machine matches exactly one documented key; every
documented key is written on some in-tree machine (the demo cluster's, the fake-NVML GPU machines), but for the
overflow CPU list, whose case tests/kubenexus/test_labels.py builds.
"""

from __future__ import annotations

import pytest

from kubenexus.topology import json_codec
from kubenexus.topology.labels import (
    NUMA_PREFIX,
    PUBLISHED_ANNOTATIONS,
    PUBLISHED_LABELS,
    NodeMetadata,
    PublishedKey,
    encode_node_metadata,
)
from tests.conftest import SnapshotUnpacker
from tests.discovered_topologies import FIXTURES, fixture_topology
from tools import labels_doc

OVERFLOW_CPUS = PUBLISHED_ANNOTATIONS[0]


def _documented(key: str, published: tuple[PublishedKey, ...]) -> list[PublishedKey]:
    return [entry for entry in published if entry.matches(key)]


def _undocumented(metadata: NodeMetadata) -> list[str]:
    labels = [key for key in metadata.labels if len(_documented(key, PUBLISHED_LABELS)) != 1]
    annotations = [key for key in metadata.annotations if len(_documented(key, PUBLISHED_ANNOTATIONS)) != 1]
    return labels + annotations


def test_the_page_is_what_the_codec_says() -> None:
    assert labels_doc.main(["--check"]) == 0


def test_the_page_is_short() -> None:
    assert len(labels_doc.render().splitlines()) < 300


@pytest.mark.parametrize("fixture", FIXTURES)
def test_every_key_written_on_a_fixture_is_documented_once(
    fixture: str, unpack_snapshot: SnapshotUnpacker, tmp_path_factory: pytest.TempPathFactory
) -> None:
    metadata = encode_node_metadata(fixture_topology(fixture, unpack_snapshot, tmp_path_factory))
    assert _undocumented(metadata) == []


def test_every_documented_key_is_written_on_some_machine(tmp_path_factory: pytest.TempPathFactory) -> None:
    machines = [json_codec.loads(path.read_text()) for path in sorted(labels_doc.MACHINES.glob("*.json"))]
    nvml = [name for name in FIXTURES if name.startswith("nvml/")]
    machines += [
        fixture_topology(name, SnapshotUnpacker(tmp_path_factory.mktemp("none")), tmp_path_factory) for name in nvml
    ]
    written = [encode_node_metadata(machine) for machine in machines]
    unused_labels = [e.key for e in PUBLISHED_LABELS if not any(e.matches(k) for m in written for k in m.labels)]
    unused_annotations = [
        e.key for e in PUBLISHED_ANNOTATIONS if not any(e.matches(k) for m in written for k in m.annotations)
    ]
    assert unused_labels == []
    assert unused_annotations == [OVERFLOW_CPUS.key]
    assert OVERFLOW_CPUS.key == f"{NUMA_PREFIX}node-N-cpus"
