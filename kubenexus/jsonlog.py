"""Structured logs shared by both programs: one JSON object per line on stderr.

Standard library only.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
from collections.abc import Iterator
from typing import Any

# LogRecord's own attributes; anything else on a record came from ``extra=`` and becomes a field.
_RECORD_ATTRIBUTES = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, and the record's extra fields."""

    def format(self, record: logging.LogRecord) -> str:
        document: dict[str, Any] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        document.update({key: value for key, value in vars(record).items() if key not in _RECORD_ATTRIBUTES})
        if record.exc_info:
            document["exception"] = self.formatException(record.exc_info)
        return json.dumps(document, default=str)


@contextlib.contextmanager
def json_logging(stream: Any, *, level: int = logging.INFO) -> Iterator[None]:
    """Every logger (ours, urllib3's, ...) writes JSON lines to ``stream`` while the block runs;
    other handlers (a test runner's capture) are left alone."""
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    previous_level = root.level
    root.addHandler(handler)
    root.setLevel(level)
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(previous_level)
