"""``serve --compiled-kernel``: the kernel on where numba works, a warning and the numpy path where not."""

from __future__ import annotations

import logging

import pytest

from placement import main
from placement.core import kernel


def test_the_flag_turns_the_kernel_on() -> None:
    pytest.importorskip("numba", reason="numba is not installed (the 'compiled' extra)")
    try:
        assert main.compiled_kernel()
        assert kernel.for_rows(1) is not None
    finally:
        kernel.disable()
    assert kernel.for_rows(1) is None


def test_without_a_working_numba_the_service_warns_and_answers_with_numpy(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(kernel, "enable", lambda: "numba is not installed")
    with caplog.at_level(logging.WARNING, logger=main.log.name):
        assert not main.compiled_kernel()
    assert "the compiled admission kernel is off" in caplog.text
    assert any(getattr(record, "reason", "") == "numba is not installed" for record in caplog.records)
    assert kernel.for_rows(1) is None
    args = main.build_parser().parse_args(["serve", "--compiled-kernel"])
    assert args.compiled_kernel
