"""Metrics, health and log lines of the running agent."""

from __future__ import annotations

import io
import json
import logging

import pytest

from agent.serving import Health
from kubenexus.addresses import parse_address
from kubenexus.jsonlog import json_logging


@pytest.mark.parametrize(
    ("address", "expected"),
    [(":9400", ("", 9400)), ("127.0.0.1:0", ("127.0.0.1", 0)), ("[::1]:9400", ("::1", 9400))],
)
def test_metrics_address(address: str, expected: tuple[str, int]) -> None:
    assert parse_address(address) == expected


@pytest.mark.parametrize("address", ["9400", ":http", "host:70000", ""])
def test_bad_metrics_address_is_refused(address: str) -> None:
    with pytest.raises(ValueError, match="not HOST:PORT"):
        parse_address(address)


def test_ready_only_while_publishing_succeeded_recently() -> None:
    now = [100.0]
    health = Health(window_s=180, clock=lambda: now[0])
    assert not health.ready()  # nothing published yet
    health.mark_success()
    now[0] += 180
    assert health.ready()
    now[0] += 1
    assert not health.ready()


def test_log_lines_are_one_json_object_with_the_extra_fields() -> None:
    stream = io.StringIO()
    with json_logging(stream):
        logging.getLogger("kubenexus.test").warning("publish failed", extra={"target": "node", "attempts": 3})
    logging.getLogger("kubenexus.test").warning("after the block: not ours to format")
    (line,) = stream.getvalue().splitlines()
    record = json.loads(line)
    assert {key: record[key] for key in ("level", "logger", "message", "target", "attempts")} == {
        "level": "warning",
        "logger": "kubenexus.test",
        "message": "publish failed",
        "target": "node",
        "attempts": 3,
    }
    assert record["time"].endswith("+00:00")
