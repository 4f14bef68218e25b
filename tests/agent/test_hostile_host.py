"""Hostile host files: what an attacker or broken firmware can put under a host root.

Every case runs the real CLI (``python -m agent.main discover --no-nvml --format json``) in a child
process whose address space is capped (RLIMIT_AS) and whose run time is bounded, so a regression is a
failing test, not an OOM-killed or swapping test machine and not a hung suite. The property: a hostile
file costs a warning naming its path, discovery exits 0, and no impossible value is published as a fact.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.discovery import discover
from agent.hostfs import HostFS, HostFSError
from kubenexus.topology.cpulist import MAX_CPUS
from kubenexus.topology.json_codec import loads
from kubenexus.topology.model import NodeTopology
from tests import REPO
from tests.fake_sysfs import add_pci_gpu, build_two_socket_host

pytestmark = pytest.mark.slow

MEMORY_CAP_BYTES = 512 << 20  # a DaemonSet-sized limit; a healthy discovery needs a tenth of it
TIME_LIMIT_S = 30  # a healthy discovery of the fake host takes well under a second, process start included
POSSIBLE_CPUS = 32  # the fake host's cpu/possible is 0-31
NODE = "sys/devices/system/node"
GPU = "sys/bus/pci/devices/0000:81:00.0"

_CAPPED_CLI = """
import resource, runpy, sys
cap = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
sys.argv = ["kubenexus-agent", *sys.argv[2:]]
runpy.run_module("agent.main", run_name="__main__")
"""


def discover_capped(root: Path) -> NodeTopology:
    """``kubenexus-agent discover`` of ``root`` in a child process, under the memory cap and time limit."""
    command = [sys.executable, "-c", _CAPPED_CLI, str(MEMORY_CAP_BYTES)]
    command += ["discover", "--host-root", str(root), "--no-nvml", "--format", "json"]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=TIME_LIMIT_S, check=False, cwd=REPO)
    except subprocess.TimeoutExpired:
        pytest.fail(f"discovery still running after {TIME_LIMIT_S} s: a read that blocks, or work the input can grow")
    assert result.returncode == 0, f"exit status {result.returncode}: {result.stderr[-2000:]}"
    return loads(result.stdout)


def build_host(root: Path) -> Path:
    build_two_socket_host(root)
    add_pci_gpu(root)
    return root


@pytest.fixture
def host(tmp_path: Path) -> Path:
    return build_host(tmp_path / "host")


@pytest.fixture(scope="module")
def healthy() -> NodeTopology:
    with tempfile.TemporaryDirectory(prefix="hostile-healthy-") as temporary:
        return discover(HostFS(str(build_host(Path(temporary) / "host"))), nvml=None)


def assert_warned(topology: NodeTopology, path: str, text: str) -> None:
    assert any(w.path == path and text in w.message for w in topology.warnings), topology.warnings


def assert_no_impossible_fact(topology: NodeTopology, cpu_id_limit: int = POSSIBLE_CPUS) -> None:
    """What the kernel can never report is not in the model, whatever the host files held."""
    machine = topology.machine
    cell_ids = {cell.id for cell in topology.numa_cells}
    cpu_lists = [machine.online_cpus, machine.offline_cpus]
    cpu_lists += [cell.cpus for cell in topology.numa_cells]
    cpu_lists += [device.local_cpus for device in topology.pci_devices]
    cpu_lists += [gpu.cpu_affinity for gpu in topology.gpus]
    assert all(0 <= cpu < cpu_id_limit for cpus in cpu_lists for cpu in cpus)
    assert all(0 <= cell_id < 1024 for cell_id in cell_ids)
    for cell in topology.numa_cells:
        assert cell.memory_bytes is None or 0 <= cell.memory_bytes <= 1 << 50
        for pool in cell.hugepages:
            assert pool.total >= 0
            assert pool.free is None or 0 <= pool.free <= pool.total
        assert all(0 <= cache.size_bytes <= 1 << 50 for cache in cell.memory_side_caches)
    if topology.distances is not None:
        assert all(1 <= value <= 255 for row in topology.distances.matrix for value in row)
    for attribute in topology.memory_attributes:
        assert attribute.initiator in cell_ids
        bandwidths = (attribute.read_bandwidth_mbps, attribute.write_bandwidth_mbps)
        latencies = (attribute.read_latency_ns, attribute.write_latency_ns)
        assert all(value is None or value > 0 for value in bandwidths + latencies)
    assert all(d.numa_node is None or d.numa_node in cell_ids for d in topology.pci_devices)
    assert all(gpu.numa_node is None or gpu.numa_node in cell_ids for gpu in topology.gpus)


def test_the_healthy_host_discovers_under_the_cap(host: Path, healthy: NodeTopology) -> None:
    """The cap and the time limit are not what fails the other tests."""
    topology = discover_capped(host)
    assert topology == healthy
    assert topology.warnings == ()
    assert topology.gpus[0].numa_node == 1


# -- CPU lists and masks: bounded by the possible CPUs, never by the numbers written -----------------


@pytest.mark.parametrize(
    "relative",
    [
        "sys/devices/system/cpu/online",  # falls back to the cpuN/online flags
        "sys/devices/system/cpu/present",  # falls back to the cpuN directories
        "sys/devices/system/cpu/possible",  # CPU ids are then bounded by NR_CPUS' maximum
        f"{NODE}/node0/cpulist",  # falls back to cpumap
        f"{GPU}/local_cpulist",  # falls back to the local_cpus mask
    ],
)
def test_a_cpu_range_to_4294967295_is_a_warning_not_an_allocation(
    host: Path, healthy: NodeTopology, relative: str
) -> None:
    """Was: MemoryError (exit 70; under the DaemonSet's memory limit an OOM kill and a crash loop)."""
    (host / relative).write_text("0-4294967295\n")
    topology = discover_capped(host)
    assert_warned(topology, f"/{relative}", "CPU 4294967295 out of range")
    assert replace(topology, warnings=()) == healthy  # every list has a healthy fallback on this host


def test_cpus_past_the_possible_ones_are_refused(host: Path) -> None:
    (host / NODE / "node1/cpulist").write_text("4-7,12-15,40\n")  # possible is 0-31
    (host / NODE / "node1/cpumap").write_text("ffffffff,ffffffff\n")
    topology = discover_capped(host)
    assert topology.numa_cells[1].cpus == ()
    assert_warned(topology, f"/{NODE}/node1", "CPU 40 out of range: ids stop at 31")
    assert_warned(topology, f"/{NODE}/node1", "CPU 63 out of range: ids stop at 31")
    assert_no_impossible_fact(topology)


def test_a_200000_word_cpumap_is_refused_without_parsing_it(host: Path) -> None:
    """Was: discovery never finished (the mask became one 6,400,000-bit integer, scanned bit by bit)."""
    node1 = host / NODE / "node1"
    (node1 / "cpulist").unlink()
    (node1 / "cpumap").write_text(",".join(["ffffffff"] * 200_000) + "\n")
    topology = discover_capped(host)
    assert topology.numa_cells[1].cpus == ()
    assert_warned(topology, f"/{NODE}/node1", "cpumap larger than 65536 bytes, not read")
    assert_no_impossible_fact(topology)


def test_a_cpumap_of_more_words_than_cpus_can_take_is_refused(host: Path) -> None:
    node1 = host / NODE / "node1"
    (node1 / "cpulist").unlink()
    (node1 / "cpumap").write_text(",".join(["00000000"] * 6_999 + ["0000f0f0"]) + "\n")  # under the size cap
    topology = discover_capped(host)
    assert topology.numa_cells[1].cpus == ()
    assert_warned(topology, f"/{NODE}/node1", "7000 mask words, more than the 256")


# -- Files that are not regular files, or are far too large --------------------------------------------


@pytest.mark.parametrize(
    "relative",
    [
        f"{NODE}/node0/cpulist",
        "sys/devices/system/cpu/online",
        "proc/cpuinfo",
        f"{NODE}/node1/distance",
        f"{GPU}/numa_node",
    ],
)
def test_a_fifo_is_refused_not_waited_on(host: Path, relative: str) -> None:
    """Was: discovery waited forever for a writer."""
    (host / relative).unlink()
    os.mkfifo(host / relative)
    topology = discover_capped(host)
    assert_warned(topology, f"/{relative}", "is a FIFO, not a regular file")
    assert_no_impossible_fact(topology)


def test_a_device_a_socket_and_an_oversized_file_are_refused(host: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (host / NODE / "node0/distance").unlink()
    (host / NODE / "node0/distance").symlink_to("/dev/zero")
    (host / NODE / "node0/meminfo").unlink()
    monkeypatch.chdir(host / NODE / "node0")  # a socket's path must fit in 108 bytes
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind("meminfo")
        (host / "proc/cpuinfo").write_bytes(b"model name\t: Big\n" * 100_000)  # only its head is read
        (host / NODE / "node1/cpulist").write_text("4-7,12-15," * 8_000)
        topology = discover_capped(host)
    # The link to /dev/zero resolves inside the root, where there is none: the machine's device is never opened.
    assert_warned(topology, f"/{NODE}/node0/distance", "missing")
    assert_warned(topology, f"/{NODE}/node0/meminfo", "is a socket, not a regular file")
    with pytest.raises(HostFSError, match="is a character device, not a regular file"):
        HostFS("/").read_text("/dev/zero")  # on the live root, where a link to a device would lead
    assert_warned(topology, f"/{NODE}/node1/cpulist", "larger than 65536 bytes")
    assert topology.machine.cpu_model == "Big"
    assert (topology.distances, topology.numa_cells[0].memory_bytes) == (None, None)
    assert topology.numa_cells[1].cpus == (4, 5, 6, 7, 12, 13, 14, 15)  # from cpumap


def test_a_file_swapped_for_a_fifo_after_the_type_check_is_still_refused(
    host: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The open does not block and the open file is checked again: no window between check and open."""
    fifo = host / NODE / "node0/distance"
    fifo.unlink()
    os.mkfifo(fifo)
    regular = os.stat(host / NODE / "node1/distance")
    real_stat = os.stat

    def stat_before_the_swap(path: str, *args: Any, **kwargs: Any) -> os.stat_result:
        return regular if path == str(fifo) else real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat_before_the_swap)
    outcome: list[BaseException] = []

    def read() -> None:
        try:
            HostFS(str(host)).read_text(f"/{NODE}/node0/distance")
        except HostFSError as error:
            outcome.append(error)

    reader = threading.Thread(target=read, daemon=True)  # a blocked open cannot be cancelled, only abandoned
    reader.start()
    reader.join(TIME_LIMIT_S)
    assert not reader.is_alive(), "opening the FIFO blocked"
    assert [str(error) for error in outcome] == [f"/{NODE}/node0/distance: is a FIFO, not a regular file; not read"]


# -- Values no kernel writes ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("relative", "text", "warning"),
    [
        (f"{NODE}/node0/distance", "10 -21\n", "distance -21 is outside the kernel's 1-255"),
        (f"{NODE}/node1/distance", "0 10\n", "distance 0 is outside"),
        (f"{NODE}/node1/distance", "21 256\n", "distance 256 is outside"),
        (f"{NODE}/node0/hugepages/hugepages-2048kB/nr_hugepages", "-512\n", "-512 pages of 2048 KiB is impossible"),
        (f"{NODE}/node0/hugepages/hugepages-2048kB/free_hugepages", "-1\n", "-1 free of 512 is impossible"),
        (f"{NODE}/node0/hugepages/hugepages-2048kB/nr_hugepages", f"{1 << 40}\n", "is impossible"),
        (f"{NODE}/node0/meminfo", "Node 0 MemTotal: 9999999999999999 kB\n", "impossible"),
        (f"{NODE}/node0/meminfo", "Node 0 MemTotal: -16000000 kB\n", "impossible"),
        (f"{NODE}/node0/access1/initiators/read_bandwidth", "-131072\n", "-131072 is negative"),
        (f"{NODE}/node1/memory_side_cache/index1/size", "-1\n", "a size of -1 bytes is impossible"),
        (f"{GPU}/numa_node", "7\n", "numa_node is 7, not a NUMA node of this host"),
        (f"{GPU}/numa_node", "5000\n", "numa_node is 5000, not a NUMA node of this host"),
    ],
)
def test_an_impossible_value_is_a_warning_not_a_fact(host: Path, relative: str, text: str, warning: str) -> None:
    """Was: published as fact, without a warning."""
    (host / relative).write_text(text)
    topology = discover_capped(host)
    assert_warned(topology, f"/{relative}", warning)
    assert_no_impossible_fact(topology)


@pytest.mark.parametrize("link", ["/etc/hostname", "../../../../../../../../../../etc/hostname"])
def test_a_link_never_leads_a_read_out_of_the_host_root(tmp_path: Path, link: str) -> None:
    """A link in the tree, absolute or climbing past the root with ``..``, resolves inside the root: it reads
    the root's own /etc/hostname (here: a planted one), never this machine's."""
    root = tmp_path / "host"
    attribute = root / "sys" / "devices" / "system" / "node" / "node0" / "cpulist"
    attribute.parent.mkdir(parents=True)
    attribute.symlink_to(link)
    fs = HostFS(str(root))
    with pytest.raises(HostFSError, match="missing"):
        fs.read_text("/sys/devices/system/node/node0/cpulist")
    assert not fs.exists("/sys/devices/system/node/node0/cpulist")
    (root / "etc").mkdir()
    (root / "etc" / "hostname").write_text("inside-the-root\n")
    fs.forget_links()
    assert fs.read_str("/sys/devices/system/node/node0/cpulist") == "inside-the-root"
    # A directory link out of the root, listed: the root's own directory, or missing.
    (root / "sys" / "escape").symlink_to("/etc")
    assert fs.listdir("/sys/escape") == ["hostname"]


def test_escape_sequences_in_a_host_file_never_reach_the_terminal_or_the_model(host: Path) -> None:
    """A ``model name`` carrying terminal escapes (clear the screen, set the window title, ring the bell):
    the control characters are dropped when read, so neither the model nor the table a terminal shows carries
    one; what is left is printable text."""
    (host / "proc" / "cpuinfo").write_text("processor\t: 0\nmodel name\t: Evil\x1b[2J\x1b]0;owned\x07 CPU\x9b1m\n")
    assert discover_capped(host).machine.cpu_model == "Evil[2J]0;owned CPU1m"
    command = [sys.executable, "-m", "agent.main", "discover", "--host-root", str(host), "--no-nvml"]
    table = subprocess.run(command, capture_output=True, text=True, timeout=TIME_LIMIT_S, check=True, cwd=REPO)
    assert "Evil[2J]0;owned CPU1m" in table.stdout
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f]", table.stdout)


def test_a_numa_node_id_past_max_numnodes_is_left_out(host: Path, healthy: NodeTopology) -> None:
    """Was: published as cell 5000 (and the distance matrix lost to it)."""
    shutil.copytree(host / NODE / "node1", host / NODE / "node5000", symlinks=True)
    topology = discover_capped(host)
    assert_warned(topology, f"/{NODE}/node5000", "past the kernel's limit of 1024 nodes")
    assert replace(topology, warnings=()) == healthy


def test_an_hmat_initiator_that_is_no_node_is_left_out(host: Path, healthy: NodeTopology) -> None:
    initiators = host / NODE / "node1/access1/initiators"
    (initiators / "node7").symlink_to("../../../node1")
    topology = discover_capped(host)
    assert_warned(topology, f"/{NODE}/node1/access1/initiators/node7", "not a NUMA node of this host")
    assert replace(topology, warnings=()) == healthy


# -- Fuzz: hostile content in any file the parsers read, several at once -------------------------------

_TEMPLATE = build_host(Path(tempfile.mkdtemp(prefix="kubenexus-hostile-")) / "host")
_OTHER_CPUS = re.compile(r"sys/devices/system/cpu/cpu([2-9]|1[0-9])/")  # the same files as cpu0's and cpu1's
_FILES = sorted(
    relative
    for dirpath, _, names in os.walk(_TEMPLATE)
    for name in names
    if not Path(dirpath, name).is_symlink()
    and not _OTHER_CPUS.match(relative := str(Path(dirpath, name).relative_to(_TEMPLATE)))
)
_NUMBERS = st.sampled_from([-(1 << 63), -1, 0, 256, 1023, 1024, 8192, 1 << 32, 1 << 50, 1 << 64])
_HOSTILE_TEXT = st.one_of(
    st.builds(lambda high: f"0-{high}\n", _NUMBERS),
    st.builds(lambda n: f"{n}\n", _NUMBERS),
    st.builds(lambda words: ",".join(["ffffffff"] * words) + "\n", st.sampled_from([2, 257, 7000])),
    st.builds(lambda n: f"Node 0 MemTotal: {n} kB\n", _NUMBERS),
    st.builds(lambda a, b: f"{a} {b}\n", _NUMBERS, _NUMBERS),
    st.just("0," * 40_000),
)
# Half of the damage is a file of another type, half hostile text in a regular file.
_DAMAGE = st.sampled_from(["fifo", "device", "directory", "text", "text", "text"]).flatmap(
    lambda kind: _HOSTILE_TEXT if kind == "text" else st.just(kind)
)


def _make_hostile(path: Path, damage: str) -> None:
    path.unlink()
    if damage == "fifo":
        os.mkfifo(path)
    elif damage == "device":
        path.symlink_to("/dev/zero")
    elif damage == "directory":
        path.mkdir()
    else:
        path.write_text(str(damage))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    damaged=st.lists(
        st.tuples(st.sampled_from(_FILES), _DAMAGE),
        min_size=1,
        max_size=3,
        unique_by=lambda item: item[0],
    )
)
def test_hostile_files_never_crash_hang_or_become_facts(damaged: list[tuple[str, str]], tmp_path: Path) -> None:
    root = Path(tempfile.mkdtemp(dir=tmp_path)) / "host"
    shutil.copytree(_TEMPLATE, root, symlinks=True)
    for relative, damage in damaged:
        _make_hostile(root / relative, damage)
    topology = discover_capped(root)
    possible_intact = all(relative != "sys/devices/system/cpu/possible" for relative, _ in damaged)
    assert_no_impossible_fact(topology, POSSIBLE_CPUS if possible_intact else MAX_CPUS)
