"""Profiles: which plugins run. Only the optional ones may be left out, each refusal says what is wrong and
what is accepted, and a service without a plugin answers its calls with a clear UNIMPLEMENTED."""

from __future__ import annotations

import subprocess
import sys

import grpc
import pytest

from placement.api.v1 import placement_pb2 as pb
from placement.core.pods import ContainerSpec, PodSpec
from placement.service.engine import PlacementEngine
from placement.service.errors import GangsUnavailable, PreemptionUnavailable
from placement.service.framework.profile import OPTIONAL, REQUIRED, Profile, ProfileError
from placement.service.results import GangSpec
from placement.state.cluster_index import ClusterIndex
from tests.grpc_server import RunningServer
from tests.machines.node_topologies import cpu_node


def _pod(name: str) -> PodSpec:
    resources = {"cpu": "2", "memory": "1Gi"}
    return PodSpec(namespace="ml", name=name, containers=(ContainerSpec("main", requests=resources, limits=resources),))


def test_the_default_profile_runs_every_plugin() -> None:
    assert all(Profile().runs(name) for name in REQUIRED + OPTIONAL)


@pytest.mark.parametrize("names", [["Gangs"], ["Preemption"], ["Gangs", " Preemption", ""]])
def test_optional_plugins_may_be_left_out(names: list[str]) -> None:
    profile = Profile.without(names)
    assert {name for name in OPTIONAL if not profile.runs(name)} == {name.strip() for name in names if name.strip()}
    assert all(profile.runs(name) for name in REQUIRED)


def test_an_unknown_plugin_is_refused_with_the_accepted_names() -> None:
    with pytest.raises(ProfileError, match=r"unknown plugin\(s\) Gang; the plugins that may be disabled are Gangs"):
        Profile.without(["Gang"])


@pytest.mark.parametrize("name", REQUIRED)
def test_a_required_plugin_cannot_be_left_out(name: str) -> None:
    with pytest.raises(ProfileError, match=f"{name} cannot be disabled: without them the service would place pods"):
        Profile.without([name])


def test_without_preemption_preempt_and_check_eviction_are_unimplemented() -> None:
    index = ClusterIndex()
    index.upsert_topology("n", cpu_node())
    engine = PlacementEngine.over(index, profile=Profile.without(["Preemption"]))
    with pytest.raises(PreemptionUnavailable, match="plugin Preemption"):
        engine.preempt(_pod("p"))
    assert engine.reserve(_pod("q")).placement is not None  # the rest of the pipeline is there
    server = RunningServer(engine)
    try:
        with pytest.raises(grpc.RpcError) as caught:
            server.stub.Preempt(pb.PreemptRequest(pod=pb.Pod(namespace="ml", name="p")))
        error: grpc.Call = caught.value  # type: ignore[assignment]
        assert error.code() is grpc.StatusCode.UNIMPLEMENTED
        assert "preemption is left out" in (error.details() or "")
    finally:
        server.close()


def test_without_gangs_place_gang_and_permit_are_unimplemented() -> None:
    engine = PlacementEngine.over(ClusterIndex(), profile=Profile.without(["Gangs"]))
    with pytest.raises(GangsUnavailable):
        engine.place_gang(GangSpec("ml", "g", 1, (_pod("a"),)))
    with pytest.raises(GangsUnavailable):
        engine.permit_status("ml", "a")


def test_serve_refuses_a_bad_profile_before_it_starts() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "placement.main", "serve", "--demo", "--disable-plugins", "Gangs,NodeResources"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2
    assert "--disable-plugins: plugin(s) NodeResources cannot be disabled" in result.stderr
    assert "Traceback" not in result.stderr
