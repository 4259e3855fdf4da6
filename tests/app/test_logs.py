"""Log lines as a log shipper reads them: one JSON object per line with --log-format json."""

from __future__ import annotations

import json
import logging

import pytest

from app.logs import configure_logging


def test_json_logs_are_one_object_per_line(capsys: pytest.CaptureFixture[str]) -> None:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    configure_logging("info", "json", "n2")
    try:
        logging.getLogger("raftlog.raft").info("n2 is leader in term %d", 7)
        try:
            raise ValueError("boom")
        except ValueError:
            logging.getLogger("raftlog.storage").exception("flush failed")
        lines = capsys.readouterr().err.splitlines()
    finally:
        root.handlers[:], root.level = handlers, level
    first, second = (json.loads(line) for line in lines)
    assert first["message"] == "n2 is leader in term 7" and first["level"] == "info"
    assert first["node"] == "n2" and first["logger"] == "raftlog.raft" and first["ts"].endswith("+00:00")
    assert second["level"] == "error" and "ValueError: boom" in second["exc"]
