"""The JSON form is lossless and refuses what it cannot read."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kubenexus.topology.json_codec import TopologyDecodeError, dumps, loads, to_dict
from kubenexus.topology.model import (
    SCHEMA_VERSION,
    DeviceLink,
    DiscoveryWarning,
    Distances,
    Gpu,
    HugePages,
    Machine,
    MemoryKind,
    NodeTopology,
    NumaCell,
    NvLink,
    NvLinkRemote,
    PathKind,
)
from tests.conftest import hwloc_snapshot_names

MACHINE = Machine("Test CPU", "x86_64", 1, 2, 4, (0, 1, 2, 3), (4,))


def _gpu_node() -> NodeTopology:
    return NodeTopology(
        machine=MACHINE,
        numa_cells=(NumaCell(0, (0, 1, 2, 3), 1 << 34, (HugePages(2048, 16, 8),), MemoryKind.DRAM),),
        distances=Distances((0,), ((10,),)),
        gpus=(
            Gpu(0, "0000:18:00.0", uuid="GPU-1", nvlinks=(NvLink(0, True, 4, NvLinkRemote.SWITCH, "0000:05:00.0"),)),
            Gpu(1, "0000:19:00.0", healthy=False, health_reason="GPU is lost"),
        ),
        links=(DeviceLink("GPU0", "GPU1", PathKind.NVLINK, 18, nvml_path=PathKind.SYS),),
        gpu_source="nvml",
        warnings=(DiscoveryWarning("nvml", "GPU1 lost", None),),
    )


def test_round_trip_of_a_gpu_node() -> None:
    topology = _gpu_node()
    assert loads(dumps(topology)) == topology
    assert loads(dumps(topology, indent=2)) == topology


@pytest.mark.parametrize("name", hwloc_snapshot_names() or ["<no shared data>"])
def test_round_trip_of_every_real_snapshot(name: str, built: Callable[[str], NodeTopology]) -> None:
    topology = built(f"hwloc/{name}")  # discovered once per session, as tests/kubenexus/test_nrt.py reads it too
    text = dumps(topology)
    assert loads(text) == topology
    assert json.loads(text)["schema_version"] == SCHEMA_VERSION


def test_newer_schema_is_refused_with_a_clear_message() -> None:
    document = to_dict(_gpu_node())
    document["schema_version"] = SCHEMA_VERSION + 1
    with pytest.raises(TopologyDecodeError, match="newer than this program understands"):
        loads(json.dumps(document))


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.pop("machine"), "missing field 'machine'"),
        (lambda d: d["machine"].update(sockets="two"), r"machine.sockets: expected an integer"),
        (lambda d: d["numa_cells"][0].update(memory_kind="SRAM"), "is not one of"),
        (lambda d: d.update(gpus={}), "gpus: expected a list"),
        (lambda d: d.update(schema_version=None), "schema_version is missing"),
    ],
)
def test_malformed_documents_are_refused(mutate: Callable[[dict[str, object]], object], message: str) -> None:
    document = to_dict(_gpu_node())
    mutate(document)
    with pytest.raises(TopologyDecodeError, match=message):
        loads(json.dumps(document))


def test_not_json_is_refused() -> None:
    with pytest.raises(TopologyDecodeError, match="not JSON"):
        loads("{")
    with pytest.raises(TopologyDecodeError, match="must be a JSON object"):
        loads("[]")


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5),
        lambda c: st.lists(c) | st.dictionaries(st.text(max_size=8), c),
        max_leaves=20,
    )
)
def test_arbitrary_json_never_crashes_the_decoder(document: object) -> None:
    with contextlib.suppress(TopologyDecodeError):
        loads(json.dumps(document))
