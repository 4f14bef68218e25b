"""How ``serve`` chooses the admission kernel: the one built ahead of time by default where there is one,
numba's with ``--compiled-kernel``, the numpy path with ``--no-compiled-kernel``; a warning only where the
kernel was asked for and could not load."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from placement import main
from placement.core import kernel


def test_the_flag_turns_the_kernel_on() -> None:
    pytest.importorskip("numba", reason="numba is not installed (the 'compiled' extra)")
    try:
        assert main.compiled_kernel(allow_jit=True)
        assert kernel.for_rows(1) is not None
    finally:
        kernel.disable()
    assert kernel.for_rows(1) is None


@pytest.mark.parametrize(("allow_jit", "level"), [(True, logging.WARNING), (False, logging.INFO)])
def test_a_kernel_that_does_not_load_leaves_the_numpy_path(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, allow_jit: bool, level: int
) -> None:
    asked: list[dict[str, Any]] = []

    def refused(**options: Any) -> str:
        asked.append(options)
        return "numba is not installed"

    monkeypatch.setattr(kernel, "enable", refused)
    with caplog.at_level(logging.INFO, logger=main.log.name):
        assert not main.compiled_kernel(allow_jit=allow_jit)
    assert asked == [{"allow_jit": allow_jit}]
    off = [r for r in caplog.records if "the compiled admission kernel is off" in r.getMessage()]
    assert [r.levelno for r in off] == [level]
    assert getattr(off[0], "reason", "") == "numba is not installed"
    assert kernel.for_rows(1) is None


def test_the_flags_parse_and_exclude_each_other(capsys: pytest.CaptureFixture[str]) -> None:
    parser = main.build_parser()
    assert parser.parse_args(["serve", "--compiled-kernel"]).compiled_kernel
    assert parser.parse_args(["serve", "--no-compiled-kernel"]).no_compiled_kernel
    default = parser.parse_args(["serve"])
    assert not default.compiled_kernel
    assert not default.no_compiled_kernel
    with pytest.raises(SystemExit):
        parser.parse_args(["serve", "--compiled-kernel", "--no-compiled-kernel"])
    assert "not allowed with argument" in capsys.readouterr().err
