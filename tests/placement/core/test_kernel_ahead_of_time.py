"""The admission kernel built ahead of time (``placement.core.kernel.ahead_of_time``): what ``enable`` loads,
refuses and says. That it answers as the numpy path does is ``test_compiled_kernel.py``'s, run with each kernel.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from placement.core import kernel
from placement.core.kernel import ahead_of_time


@pytest.fixture(autouse=True)
def numpy_path_after() -> Iterator[None]:
    yield
    kernel.disable()


def _require_built() -> None:
    _, not_built = kernel.built_ahead_of_time()
    if not_built is not None:
        pytest.skip(f"the kernel is not built ahead of time: {not_built}")


def test_the_service_loads_the_built_kernel_without_numba() -> None:
    _require_built()
    code = (
        "import sys\n"
        "from placement.core import kernel\n"
        "assert kernel.enable(allow_jit=False) is None\n"
        "assert kernel.for_rows(1) is not None\n"
        "print(kernel.active(), 'numba' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{kernel.AHEAD_OF_TIME} False"


def test_a_module_built_from_other_rules_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    _require_built()
    monkeypatch.setattr(ahead_of_time, "source_digest", lambda: "0" * 64)
    reason = kernel.enable(allow_jit=False)
    assert reason is not None
    assert "built from other rules than compiled.py's: build it again" in reason
    assert kernel.for_rows(1) is None


def test_without_a_built_module_or_numba_the_numpy_path_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, f"placement.core.kernel.{ahead_of_time.MODULE}", None)  # an ImportError
    reason = kernel.enable(allow_jit=False)
    assert reason == (
        "compiled admission kernel off, the numpy path answers: not built ahead of time "
        "(run python -m placement.core.kernel.ahead_of_time)"
    )
    assert kernel.active() is None


@pytest.mark.slow
def test_the_build_command_writes_the_module_and_its_source_digest(tmp_path: Path) -> None:
    pytest.importorskip("numba", reason="building the kernel needs numba (the 'compiled' extra)")
    assert ahead_of_time.main(["--output-dir", str(tmp_path)]) == 0
    assert len(list(tmp_path.glob(f"{ahead_of_time.MODULE}.*.so"))) == 1
    assert (tmp_path / ahead_of_time.SOURCE_DIGEST_FILE).read_text().strip() == ahead_of_time.source_digest()


def test_a_build_that_fails_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    assert ahead_of_time.main(["--output-dir", str(blocked / "sub")]) == 1
    error = capsys.readouterr().err
    assert error.startswith("error: ")
    assert len(error.strip().splitlines()) == 1


def test_an_array_of_another_dtype_is_refused_not_read() -> None:
    _require_built()
    module, _ = kernel.built_ahead_of_time()
    assert module is not None
    rows = np.zeros(1, dtype=np.int64)
    wrong = (rows, np.ones(1, dtype=np.int64), *([None] * 22))  # numa_count must be int8
    with pytest.raises(TypeError, match=r"admission_checks: argument 1 is int64 \[1-d\], .* takes int8 \[1-d\]"):
        module.admission_checks(*wrong)
    with pytest.raises(TypeError, match="node_parts: 1 arguments, the module built ahead of time takes 12"):
        module.node_parts(rows)
