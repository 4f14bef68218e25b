"""tools/abuse_placement.py: loopback only, and every case as expected against the demo service."""

from __future__ import annotations

import shutil

import pytest

from tools.abuse_placement import AUTH_CASES, CASES, loopback, main


@pytest.mark.parametrize("address", ["10.0.0.1:50051", "example.com:50051", "[::2]:50051", "0.0.0.0:1", "localhost"])
def test_only_loopback_addresses_are_accepted(address: str) -> None:
    with pytest.raises(SystemExit, match=r"only 127\.0\.0\.1, ::1 or localhost"):
        loopback(address)


@pytest.mark.parametrize("address", ["127.0.0.1:50051", "[::1]:50051", "localhost:7070"])
def test_loopback_addresses_pass(address: str) -> None:
    assert loopback(address) == address


def test_every_case_holds_against_the_demo_service(capsys: pytest.CaptureFixture[str]) -> None:
    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed: the authentication cases need throwaway certificates")
    assert main([]) == 0, capsys.readouterr().out
    lines = capsys.readouterr().out.splitlines()
    for case in (*CASES, *AUTH_CASES):
        assert any(line.startswith(f"{case.name}: sent ") and "state clean" in line for line in lines), lines
    assert "plaintext-on-an-open-address: serve --listen 0.0.0.0:0 -> exit 2" in lines
    assert "health: SERVING" in lines
