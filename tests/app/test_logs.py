"""Log lines as a log shipper reads them: one JSON object per line with --log-format json."""

from __future__ import annotations

import json
import logging

import pytest

from raftlog.app.logs import configure_logging


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


def test_an_answer_whose_caller_is_gone_is_a_warning_not_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    """gRPC's own ERROR for it would count as a problem in the fault suite, which reads every ERROR line."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    configure_logging("info", "text", "n2")
    grpc_core = logging.getLogger("grpc._cython.cygrpc")
    try:
        try:
            raise RuntimeError('Failed "execute_batch"')
        except RuntimeError:  # gRPC logs it from its handler's except clause, as here
            grpc_core.exception("ExecuteBatchError raised in core by servicer method [%s]",
                                "/raftlog.peer.v1.Peer/Append")
        grpc_core.error("Unexpected [%s] raised by servicer method [%s]", "ValueError", "/x")
        lines = capsys.readouterr().err.splitlines()
    finally:
        root.handlers[:], root.level = handlers, level
        grpc_core.filters.clear()
    assert len(lines) == 2
    assert " WARNING grpc._cython.cygrpc: the answer to /raftlog.peer.v1.Peer/Append was not sent" in lines[0]
    assert " ERROR grpc._cython.cygrpc: Unexpected [ValueError]" in lines[1]
