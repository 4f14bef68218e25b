"""The kubelet source against a real gRPC server on a unix socket, serving recorded PodResources answers.

The recordings (tests/kubelet_recordings, protobuf JSON as `grpcurl -emit-defaults` prints it) are of a
2-socket node with 8 GPUs, SR-IOV VFs and a shared RDMA device without NUMA affinity, whose kubelet runs
the static CPU and memory managers (config.yaml there): CPUs 0-15,32-47 on NUMA node 0 and 16-31,48-63 on
node 1, CPUs 0,16,32,48 reserved, 1124Mi of node 0's memory reserved.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest
from google.protobuf import json_format

from agent.hostfs import HostFS
from agent.podresources.v1 import api_pb2, api_pb2_grpc
from agent.sources.kubelet import (
    KubeletOverrides,
    PodResourcesError,
    fetch_pod_resources,
    read_kubelet_settings,
    read_zone_resources,
)
from kubenexus.topology.availability import DeviceSet
from kubenexus.topology.model import HugePages, KubeletSettings, Machine, NodeTopology, NumaCell, ZoneResources
from kubenexus.topology.podfingerprint import METHOD_WITH_EXCLUSIVE_RESOURCES, pods_fingerprint
from tests import TESTS

RECORDINGS = TESTS / "kubelet_recordings"
GiB = 1 << 30
MiB = 1 << 20
NODE0_CPUS = (*range(16), *range(32, 48))
NODE1_CPUS = (*range(16, 32), *range(48, 64))
NODE0_MEMTOTAL = 263724380 * 1024  # node0/meminfo MemTotal, kB
NODE1_MEMTOTAL = 264198012 * 1024
RECORDED_PODS = (
    ("ml-training", "trainer-0"),
    ("ml-inference", "llm-server-7d9f8c6b5-x2k4q"),
    ("kube-system", "kube-proxy-8xq2v"),
    ("gpu-operator", "nvidia-dcgm-exporter-5m7hz"),
)


def recorded_topology() -> NodeTopology:
    pools = (HugePages(size_kib=2048, total=1024, free=1024), HugePages(size_kib=1048576, total=16, free=16))
    return NodeTopology(
        machine=Machine(
            cpu_model="Intel(R) Xeon(R) Platinum 8462Y+",
            architecture="x86_64",
            sockets=2,
            cores=32,
            threads=64,
            online_cpus=tuple(range(64)),
            offline_cpus=(),
        ),
        numa_cells=(
            NumaCell(id=0, cpus=NODE0_CPUS, memory_bytes=NODE0_MEMTOTAL, hugepages=pools),
            NumaCell(id=1, cpus=NODE1_CPUS, memory_bytes=NODE1_MEMTOTAL, hugepages=pools),
        ),
    )


def allocatable_recording(name: str = "allocatable.json") -> api_pb2.AllocatableResourcesResponse:
    return json_format.Parse((RECORDINGS / name).read_text(), api_pb2.AllocatableResourcesResponse())


def list_recording() -> api_pb2.ListPodResourcesResponse:
    return json_format.Parse((RECORDINGS / "list.json").read_text(), api_pb2.ListPodResourcesResponse())


class RecordedKubelet(api_pb2_grpc.PodResourcesListerServicer):
    """Answers with recordings; ``allocatable`` answers are served in turn, the last one for good."""

    def __init__(
        self,
        allocatable: Sequence[api_pb2.AllocatableResourcesResponse],
        listed: api_pb2.ListPodResourcesResponse,
        *,
        hold_list: threading.Event | None = None,
    ) -> None:
        self._allocatable = list(allocatable)
        self._listed = listed
        self._hold_list = hold_list
        self.allocatable_calls = 0

    def GetAllocatableResources(
        self, request: api_pb2.AllocatableResourcesRequest, context: grpc.ServicerContext
    ) -> api_pb2.AllocatableResourcesResponse:
        answer = self._allocatable[min(self.allocatable_calls, len(self._allocatable) - 1)]
        self.allocatable_calls += 1
        return answer

    def List(
        self, request: api_pb2.ListPodResourcesRequest, context: grpc.ServicerContext
    ) -> api_pb2.ListPodResourcesResponse:
        if self._hold_list is not None:
            self._hold_list.wait(10)  # a kubelet stuck behind a lock
        return self._listed

    def Get(
        self, request: api_pb2.GetPodResourcesRequest, context: grpc.ServicerContext
    ) -> api_pb2.GetPodResourcesResponse:
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "not recorded")


@contextmanager
def serving(
    socket_path: Path, service: api_pb2_grpc.PodResourcesListerServicer | grpc.GenericRpcHandler
) -> Iterator[str]:
    server = grpc.server(ThreadPoolExecutor(max_workers=2))
    if isinstance(service, grpc.GenericRpcHandler):
        server.add_generic_rpc_handlers((service,))
    else:
        api_pb2_grpc.add_PodResourcesListerServicer_to_server(service, server)
    server.add_insecure_port(f"unix://{socket_path}")
    server.start()
    try:
        yield str(socket_path)
    finally:
        server.stop(grace=None).wait()


@pytest.fixture
def socket_path(tmp_path: Path) -> Path:
    return tmp_path / "kubelet.sock"


def zone(zones: Sequence[ZoneResources], numa_id: int) -> dict[str, tuple[int, int, int]]:
    """A zone's resources as name -> (capacity, allocatable, available)."""
    (found,) = [z for z in zones if z.numa_id == numa_id]
    return {r.name: (r.capacity, r.allocatable, r.available) for r in found.resources}


# -- availability from the recorded node --------------------------------------------------------------------


def test_zone_availability_of_the_recorded_node_matches_the_kubelet(socket_path: Path) -> None:
    servicer = RecordedKubelet([allocatable_recording()], list_recording())
    with serving(socket_path, servicer) as path:
        reading = read_zone_resources(recorded_topology(), path, timeout_s=5)

    assert [z.numa_id for z in reading.zone_resources] == [0, 1]
    # (capacity, allocatable, available)
    assert zone(reading.zone_resources, 0) == {
        # 32 CPUs; 0 and 32 reserved; trainer-0 holds 1-8
        "cpu": (32, 30, 22),
        # hugepage pools from sysfs; trainer-0 holds 8 of the 16 1Gi pages
        "hugepages-1Gi": (16 * GiB, 16 * GiB, 8 * GiB),
        "hugepages-2Mi": (2 * GiB, 2 * GiB, 2 * GiB),
        # trainer-0 holds one of the 4 VFs and all 4 GPUs of node 0
        "intel.com/sriov_netdevice": (4, 4, 3),
        # MemTotal; allocatable = MemTotal - hugepages - 1124Mi reserved; trainer-0 pins 64Gi
        "memory": (
            NODE0_MEMTOTAL,
            NODE0_MEMTOTAL - 18 * GiB - 1124 * MiB,
            NODE0_MEMTOTAL - 18 * GiB - 1124 * MiB - 64 * GiB,
        ),
        "nvidia.com/gpu": (4, 4, 0),
    }
    assert zone(reading.zone_resources, 1) == {
        "cpu": (32, 30, 26),  # 16 and 48 reserved; llm-server holds 17, 18, 49, 50
        "hugepages-1Gi": (16 * GiB, 16 * GiB, 16 * GiB),
        "hugepages-2Mi": (2 * GiB, 2 * GiB, 1 * GiB),
        "intel.com/sriov_netdevice": (4, 4, 4),
        "memory": (NODE1_MEMTOTAL, NODE1_MEMTOTAL - 18 * GiB, NODE1_MEMTOTAL - 18 * GiB - 16 * GiB),
        "nvidia.com/gpu": (4, 4, 2),
    }
    # Resources come sorted by name, as the exporter publishes them.
    assert [r.name for r in reading.zone_resources[0].resources] == sorted(zone(reading.zone_resources, 0))


def test_devices_without_numa_affinity_are_in_no_zone_and_say_so(socket_path: Path) -> None:
    with serving(socket_path, RecordedKubelet([allocatable_recording()], list_recording())) as path:
        snapshot = fetch_pod_resources(path, timeout_s=5)
        reading = read_zone_resources(recorded_topology(), path, timeout_s=5)

    shared = [d for d in snapshot.allocatable.devices if d.resource_name == "rdma/hca_shared_devices_a"]
    assert shared == [
        DeviceSet("rdma/hca_shared_devices_a", ("rdma-shared-0",), ()),
        DeviceSet("rdma/hca_shared_devices_a", ("rdma-shared-1",), ()),
    ]
    assert all("rdma/hca_shared_devices_a" not in zone(reading.zone_resources, n) for n in (0, 1))
    assert [w.message for w in reading.warnings] == [
        "2 allocatable rdma/hca_shared_devices_a devices have no NUMA affinity (their device plugin reports no "
        "topology); they are in no zone"
    ]


def test_the_snapshot_is_plain_values_converted_field_by_field(socket_path: Path) -> None:
    with serving(socket_path, RecordedKubelet([allocatable_recording()], list_recording())) as path:
        snapshot = fetch_pod_resources(path, timeout_s=5)

    assert snapshot.allocatable.cpu_ids == tuple(c for c in range(64) if c not in (0, 16, 32, 48))
    assert len(snapshot.allocatable.memory) == 6
    assert [(p.namespace, p.name) for p in snapshot.pods] == list(RECORDED_PODS)
    trainer = snapshot.pods[0].containers[0]
    assert trainer.name == "trainer"
    assert trainer.cpu_ids == tuple(range(1, 9))
    assert [(m.memory_type, m.size_bytes, m.numa_nodes) for m in trainer.memory] == [
        ("memory", 64 * GiB, (0,)),
        ("hugepages-1Gi", 8 * GiB, (0,)),
    ]
    assert trainer.devices[0].resource_name == "nvidia.com/gpu"
    assert len(trainer.devices[0].device_ids) == 4
    assert trainer.devices[0].numa_nodes == (0,)
    assert snapshot.pods[0].containers[1].name == "log-shipper"
    assert snapshot.pods[0].containers[1].cpu_ids == ()


def test_the_pods_fingerprint_covers_the_pods_the_method_selects(socket_path: Path) -> None:
    with serving(socket_path, RecordedKubelet([allocatable_recording()], list_recording())) as path:
        every_pod = read_zone_resources(recorded_topology(), path, timeout_s=5)
        exclusive = read_zone_resources(
            recorded_topology(), path, timeout_s=5, fingerprint_method=METHOD_WITH_EXCLUSIVE_RESOURCES
        )

    assert every_pod.pods_fingerprint == pods_fingerprint(RECORDED_PODS)
    assert exclusive.pods_fingerprint == pods_fingerprint(RECORDED_PODS[:2])  # kube-proxy, dcgm hold nothing


def test_allocatable_is_read_again_on_every_reading(socket_path: Path) -> None:
    # The kubelet answers before the GPU and SR-IOV device plugins have registered, then after.
    servicer = RecordedKubelet(
        [allocatable_recording("allocatable-before-device-plugins.json"), allocatable_recording()],
        list_recording(),
    )
    with serving(socket_path, servicer) as path:
        early = read_zone_resources(recorded_topology(), path, timeout_s=5)
        late = read_zone_resources(recorded_topology(), path, timeout_s=5)

    assert servicer.allocatable_calls == 2
    assert "nvidia.com/gpu" not in zone(early.zone_resources, 0)
    assert zone(early.zone_resources, 0)["cpu"] == (32, 30, 22)
    assert zone(late.zone_resources, 0)["nvidia.com/gpu"] == (4, 4, 0)
    assert zone(late.zone_resources, 1)["nvidia.com/gpu"] == (4, 4, 2)


# -- a kubelet that cannot be read ----------------------------------------------------------------------------


def test_a_missing_socket_is_a_clear_error_and_an_empty_reading(socket_path: Path) -> None:
    with pytest.raises(PodResourcesError, match="socket does not exist") as raised:
        fetch_pod_resources(str(socket_path), timeout_s=1)
    assert raised.value.socket_path == str(socket_path)

    reading = read_zone_resources(recorded_topology(), str(socket_path), timeout_s=1)
    assert reading.zone_resources == ()
    assert reading.pods_fingerprint is None
    assert len(reading.warnings) == 1
    assert reading.warnings[0].source == "kubelet"
    assert "socket does not exist" in reading.warnings[0].message


def test_a_socket_nobody_listens_on_is_unavailable(socket_path: Path) -> None:
    socket_path.write_text("")  # left behind by a kubelet that is gone

    with pytest.raises(PodResourcesError, match="not answering") as raised:
        fetch_pod_resources(str(socket_path), timeout_s=2)
    assert raised.value.code is grpc.StatusCode.UNAVAILABLE


def test_a_kubelet_without_get_allocatable_resources_is_unimplemented(socket_path: Path) -> None:
    # Kubernetes 1.20's PodResources v1 service: List only; gRPC answers UNIMPLEMENTED for the rest.
    recorded = list_recording()
    only_list = grpc.method_handlers_generic_handler(
        "v1.PodResourcesLister",
        {
            "List": grpc.unary_unary_rpc_method_handler(
                lambda request, context: recorded,
                request_deserializer=api_pb2.ListPodResourcesRequest.FromString,
                response_serializer=api_pb2.ListPodResourcesResponse.SerializeToString,
            )
        },
    )
    with serving(socket_path, only_list) as path:
        with pytest.raises(PodResourcesError, match="does not implement GetAllocatableResources") as raised:
            fetch_pod_resources(path, timeout_s=5)
        reading = read_zone_resources(recorded_topology(), path, timeout_s=5)

    assert raised.value.code is grpc.StatusCode.UNIMPLEMENTED
    assert reading.zone_resources == ()
    assert "KubeletPodResourcesGetAllocatable" in reading.warnings[0].message


def test_a_kubelet_that_does_not_answer_in_time_exceeds_the_deadline(socket_path: Path) -> None:
    release = threading.Event()
    servicer = RecordedKubelet([allocatable_recording()], list_recording(), hold_list=release)
    with serving(socket_path, servicer) as path:
        started = time.monotonic()
        try:
            with pytest.raises(PodResourcesError, match=r"no answer within 0\.3 s") as raised:
                fetch_pod_resources(path, timeout_s=0.3)
        finally:
            release.set()
        elapsed = time.monotonic() - started

    assert raised.value.code is grpc.StatusCode.DEADLINE_EXCEEDED
    assert elapsed < 3  # the deadline, not the stuck handler, ended the call


# -- the kubelet configuration --------------------------------------------------------------------------------


def kubelet_root(tmp_path: Path, text: str | None) -> HostFS:
    config = tmp_path / "var" / "lib" / "kubelet" / "config.yaml"
    config.parent.mkdir(parents=True)
    if text is not None:
        config.write_text(text)
    return HostFS(str(tmp_path))


def test_the_recorded_kubelet_configuration(tmp_path: Path) -> None:
    fs = kubelet_root(tmp_path, (RECORDINGS / "config.yaml").read_text())

    report = read_kubelet_settings(fs)

    assert report.settings == KubeletSettings(
        topology_manager_policy="single-numa-node",
        topology_manager_scope="pod",
        cpu_manager_policy="static",
        memory_manager_policy="Static",
        reserved_cpus=(0, 16, 32, 48),
    )
    assert report.warnings == ()


def test_settings_the_file_leaves_out_take_the_kubelets_defaults(tmp_path: Path) -> None:
    fs = kubelet_root(tmp_path, "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n")

    report = read_kubelet_settings(fs)

    assert report.settings == KubeletSettings("none", "container", "none", "None", ())
    assert report.warnings == ()


def test_a_lone_reserved_cpu_that_yaml_reads_as_a_number(tmp_path: Path) -> None:
    fs = kubelet_root(tmp_path, "kind: KubeletConfiguration\ncpuManagerPolicy: static\nreservedSystemCPUs: 0\n")

    report = read_kubelet_settings(fs)

    assert report.settings is not None
    assert report.settings.reserved_cpus == (0,)


def test_a_missing_file_gives_no_settings_and_a_warning(tmp_path: Path) -> None:
    report = read_kubelet_settings(kubelet_root(tmp_path, None))

    assert report.settings is None
    assert [(w.source, w.path) for w in report.warnings] == [("kubelet", "/var/lib/kubelet/config.yaml")]
    assert "missing" in report.warnings[0].message


def test_a_garbled_file_gives_no_settings_and_a_warning(tmp_path: Path) -> None:
    report = read_kubelet_settings(kubelet_root(tmp_path, "kind: KubeletConfiguration\ncpuManagerPolicy: [static\n"))

    assert report.settings is None
    assert "not valid YAML" in report.warnings[0].message


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("- just\n- a list\n", "not a YAML mapping"),
        ("apiVersion: v1\nkind: ConfigMap\n", "expected kind KubeletConfiguration, found 'ConfigMap'"),
    ],
)
def test_a_document_that_is_not_a_kubelet_configuration(tmp_path: Path, text: str, problem: str) -> None:
    report = read_kubelet_settings(kubelet_root(tmp_path, text))

    assert report.settings is None
    assert problem in report.warnings[0].message


def test_an_unknown_policy_is_published_as_written_with_a_warning(tmp_path: Path) -> None:
    fs = kubelet_root(tmp_path, "kind: KubeletConfiguration\ntopologyManagerPolicy: prefer-closest-numa\n")

    report = read_kubelet_settings(fs)

    assert report.settings is not None
    assert report.settings.topology_manager_policy == "prefer-closest-numa"
    assert len(report.warnings) == 1
    assert "topologyManagerPolicy 'prefer-closest-numa' is not one this agent knows" in report.warnings[0].message


def test_garbled_values_fall_back_with_a_warning(tmp_path: Path) -> None:
    fs = kubelet_root(tmp_path, "kind: KubeletConfiguration\ncpuManagerPolicy: 3\nreservedSystemCPUs: 0-x\n")

    report = read_kubelet_settings(fs)

    assert report.settings is not None
    assert report.settings.cpu_manager_policy == "none"
    assert report.settings.reserved_cpus == ()
    assert [w.message.split(" ")[0] for w in report.warnings] == ["cpuManagerPolicy", "reservedSystemCPUs"]


def test_overrides_win_over_the_file(tmp_path: Path) -> None:
    fs = kubelet_root(tmp_path, (RECORDINGS / "config.yaml").read_text())

    report = read_kubelet_settings(fs, overrides=KubeletOverrides(topology_manager_policy="restricted"))

    assert report.settings is not None
    assert report.settings.topology_manager_policy == "restricted"
    assert report.settings.topology_manager_scope == "pod"  # not overridden: the file's


def test_overrides_without_a_file_assume_the_rest_with_a_warning(tmp_path: Path) -> None:
    report = read_kubelet_settings(
        kubelet_root(tmp_path, None),
        "/var/lib/kubelet/config.yaml",
        overrides=KubeletOverrides(topology_manager_policy="single-numa-node", topology_manager_scope="pod"),
    )

    assert report.settings == KubeletSettings(topology_manager_policy="single-numa-node", topology_manager_scope="pod")
    assert [w.message for w in report.warnings] == [
        "kubelet configuration missing",
        "CPU and memory manager policies are assumed to be the kubelet's defaults",
    ]
