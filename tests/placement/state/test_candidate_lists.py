"""Candidate lists kept by the bytes of their node-name field: the same answers as resolving every name, for
every request shape, through node changes; and the key itself read off the wire correctly."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from placement.api.node_names import names_key
from placement.api.server import PlacementServer, ServerOptions
from placement.api.v1 import placement_pb2 as pb
from placement.api.v1 import placement_pb2_grpc
from placement.core.pods import ContainerSpec, PodSpec
from placement.service.engine import PlacementEngine
from placement.state.candidate_lists import CandidateLists
from placement.state.cluster_index import ClusterIndex
from tests.machines.node_topologies import cpu_node, kubelet, nvswitch_node

NAMES = st.lists(st.text(alphabet="abcdefghij-0123456789", min_size=1, max_size=12), max_size=40)


def _index(count: int = 6) -> ClusterIndex:
    index = ClusterIndex(initial_capacity=2)
    for n in range(count):
        machine = nvswitch_node() if n % 2 else cpu_node(cells=2, cpus_per_cell=8, settings=kubelet("restricted"))
        index.upsert_topology(f"node-{n}", machine)
    return index


def _gpu_pod() -> pb.Pod:
    return pb.Pod(namespace="ns", name="p", containers=[pb.Container(name="c", limits={"nvidia.com/gpu": "2"})])


# --- the key -------------------------------------------------------------------------------------------


@given(names=NAMES, pod_name=st.text(max_size=20), as_json=st.booleans())
@settings(max_examples=200, deadline=None)
def test_the_key_is_the_node_name_records_whatever_the_pod(names: list[str], pod_name: str, as_json: bool) -> None:
    """Two requests with the same names have the same key, whatever their pods; the key parses back to the
    names alone."""
    pod = {"pod_json": f'{{"metadata": {{"name": "{pod_name}"}}}}'} if as_json else {"pod": pb.Pod(name=pod_name)}
    raw = pb.FilterRequest(node_names=names, **pod).SerializeToString()
    other = pb.ScoreRequest(pod=pb.Pod(name="another"), node_names=names).SerializeToString()
    key = names_key(raw)
    assert key is not None
    assert key == names_key(other)
    assert list(pb.FilterRequest.FromString(key).node_names) == names


@given(first=NAMES, second=NAMES)
@settings(max_examples=200, deadline=None)
def test_different_names_never_share_a_key(first: list[str], second: list[str]) -> None:
    keys = [names_key(pb.FilterRequest(pod=_gpu_pod(), node_names=n).SerializeToString()) for n in (first, second)]
    assert (keys[0] == keys[1]) == (first == second)


def test_a_request_laid_out_otherwise_gets_no_key() -> None:
    names_first = (
        pb.FilterRequest(node_names=["a", "b"]).SerializeToString()
        + pb.FilterRequest(pod=_gpu_pod()).SerializeToString()
    )
    assert names_key(names_first) is None  # the names come first: the key would miss one
    assert names_key(b"") is None
    assert names_key(b"\x0a\xff\xff") is None  # a length running past the end
    assert names_key(b"\x0a" + b"\xff" * 11) is None  # a varint longer than protobuf allows


# --- the kept lists ------------------------------------------------------------------------------------


def test_a_kept_list_is_resolved_once_and_again_after_a_node_comes_or_goes() -> None:
    index = _index()
    lists = CandidateLists(index)
    names = ["node-1", "ghost", "node-0"]
    first = lists.resolve(b"key", lambda: names)
    assert first.names.tolist() == ["node-1", "node-0"]
    assert first.rows.tolist() == [index.slot_of("node-1"), index.slot_of("node-0")]
    assert first.unknown == ("ghost",)

    def fail() -> list[str]:
        raise AssertionError("a kept list was resolved again")

    assert lists.resolve(b"key", fail) is first
    index.upsert_topology("ghost", nvswitch_node())  # a node gains its slot
    again = lists.resolve(b"key", lambda: names)
    assert again.names.tolist() == ["node-1", "ghost", "node-0"]
    assert again.unknown == ()
    index.remove_node("node-1")
    assert lists.resolve(b"key", lambda: names).names.tolist() == ["ghost", "node-0"]
    assert lists.resolved == 3


def test_lists_past_the_limits_are_forgotten_oldest_first() -> None:
    index = _index()
    lists = CandidateLists(index, lists=2, max_bytes=10)
    for key in (b"a", b"b", b"c"):
        lists.resolve(key, lambda: ["node-0"])
    lists.resolve(b"c", lambda: ["node-0"])
    assert lists.resolved == 3  # c kept
    lists.resolve(b"a", lambda: ["node-0"])
    assert lists.resolved == 4  # a forgotten
    lists.resolve(b"0123456789a", lambda: ["node-0"])  # longer than every kept key together: not kept
    lists.resolve(b"0123456789a", lambda: ["node-0"])
    assert lists.resolved == 6


def test_filter_and_score_answer_alike_with_and_without_the_key() -> None:
    """The engine with a key gives what it gives resolving names, through nodes coming and going."""
    index = _index(8)
    engine = PlacementEngine.over(index)
    spec = PodSpec(namespace="ns", name="p", containers=(ContainerSpec("c", limits={"cpu": "4", "memory": "8Gi"}),))
    names = ["node-3", "nowhere", "node-0", "node-5", "node-7"]
    key = pb.FilterRequest(node_names=names).SerializeToString()
    for step in range(3):
        assert engine.filter(spec, names, names_key=key) == engine.filter(spec, names)
        assert engine.score(spec, names, names_key=key) == engine.score(spec, names)
        if step == 0:
            index.upsert_topology("nowhere", nvswitch_node())
        else:
            index.remove_node("node-0")
    # Keyed: once per membership (3), Score reusing Filter's; unkeyed: every call (2 a step).
    assert engine.candidate_lists.resolved == 3 + 2 * 3


def test_a_server_resolves_a_list_sent_again_only_once() -> None:
    """Through a real gRPC server: Filter and Score of the same list, sent three times, resolve it once each."""
    index = _index()
    engine = PlacementEngine.over(index)
    names = ["node-0", "node-1", "node-2", "node-3"]

    async def run() -> list[Any]:
        server = PlacementServer(engine, ServerOptions(listen="127.0.0.1:0"))
        port = await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub: Any = placement_pb2_grpc.PlacementStub(channel)
                answers = []
                for _ in range(3):
                    feasible = (await stub.Filter(pb.FilterRequest(pod=_gpu_pod(), node_names=names))).feasible_nodes
                    answers.append(list(feasible))
                    await stub.Score(pb.ScoreRequest(pod=_gpu_pod(), node_names=feasible))
                return answers
        finally:
            await server.stop(0)

    answers = asyncio.run(run())
    assert answers == [["node-1", "node-3"]] * 3  # the GPU nodes
    assert engine.candidate_lists.resolved == 2  # Filter's list and Score's


@pytest.mark.parametrize("names", [["node-0", "node-0", "node-1"], ["node-1", ""]])
def test_a_kept_list_refuses_what_a_resolved_one_refuses(names: list[str]) -> None:
    """Duplicates are dropped and an empty name refused, with or without a key."""
    engine = PlacementEngine.over(_index())
    spec = PodSpec(namespace="ns", name="p", containers=(ContainerSpec("c", limits={"cpu": "1", "memory": "1Gi"}),))
    key = pb.FilterRequest(node_names=names).SerializeToString()
    try:
        expected: object = engine.filter(spec, names)
    except Exception as error:
        expected = str(error)
    try:
        got: object = engine.filter(spec, names, names_key=key)
    except Exception as error:
        got = str(error)
    assert got == expected
