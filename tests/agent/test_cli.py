"""``kubenexus-agent`` run as a user runs it: a real process, real exit codes, real output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kubenexus.topology.json_codec import loads
from tests import TESTS
from tests.conftest import GPU_DIR, require_shared
from tests.fake_sysfs import build_two_socket_host

pytestmark = pytest.mark.slow


def run_agent(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent.main", *args],
        check=False,
        capture_output=True,
        text=True,
        input=stdin,
        timeout=60,
    )


@pytest.fixture
def host(tmp_path: Path) -> Path:
    return build_two_socket_host(tmp_path / "host")


def test_discover_table_shows_cells_distances_and_hmat(host: Path) -> None:
    result = run_agent("discover", "--host-root", str(host))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "NUMA cell 0 (DRAM)" in out
    assert "CPUs     0-3,8-11 (8)" in out
    assert "hugepages 2 MiB: 512, 500 free" in out
    assert "memory-side cache L1: 64.0 GiB, line 64 B" in out
    assert "  0:  10  21" in out
    assert "cell 1 from cell 1 (class 1): read 131072 MB/s" in out
    assert result.stderr == ""


def test_discover_json_is_the_lossless_model(host: Path) -> None:
    result = run_agent("discover", "--host-root", str(host), "--format", "json")
    assert result.returncode == 0, result.stderr
    topology = loads(result.stdout)
    assert [cell.id for cell in topology.numa_cells] == [0, 1]
    assert topology.gpu_source is not None
    assert json.loads(result.stdout)["schema_version"] == 1


@pytest.mark.parametrize("root", ["/definitely/not/here", "."])
def test_unusable_root_exits_2_with_one_sentence(root: str, tmp_path: Path) -> None:
    result = run_agent("discover", "--host-root", str(tmp_path / root))
    assert result.returncode == 2
    assert result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr
    assert "host root" in result.stderr


def test_import_topo_of_a_real_capture() -> None:
    capture = require_shared(GPU_DIR / "aws_p5.48xlarge_8xH100__gnosia93-training-on-eks.txt")
    result = run_agent("import-topo", str(capture), "--format", "topo")
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("NV18") == 8 * 7
    from_stdin = run_agent("import-topo", "-", "--format", "json", stdin=capture.read_text())
    assert len(loads(from_stdin.stdout).gpus) == 8


def test_import_topo_of_a_gh200_keeps_the_gpu_memory_node_and_renders_it_back() -> None:
    capture = TESTS / "machines" / "captures" / "gh200_1gpu_nvidia-smi_topo_m.txt"
    imported = run_agent("import-topo", str(capture), "--format", "json")
    assert imported.returncode == 0, imported.stderr
    (gpu,) = loads(imported.stdout).gpus
    assert (gpu.numa_node, gpu.gpu_numa_node) == (0, 1)
    rendered = run_agent("import-topo", str(capture), "--format", "topo")
    assert "GPU0\t X \tNODE\tNODE\t0-71\t0\t\t1\n" in rendered.stdout


def test_import_topo_of_garbage_is_one_clear_error() -> None:
    result = run_agent("import-topo", "-", stdin="hello\nworld\n")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("kubenexus-agent: line 1")
