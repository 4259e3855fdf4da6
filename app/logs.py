"""Logging for a node: readable text by default, one JSON object per line when asked for.

Elections, role changes, truncations, recovery findings and cleaning are all
logged by the layers below through `logging`; this only chooses the format.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Literal

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
CHATTY = ("httpx", "httpcore", "hpack")  # a line per peer call otherwise
UNSENT_ANSWER = "ExecuteBatchError raised in core by servicer method"


class JsonFormatter(logging.Formatter):
    """One object per line: ts, level, logger, node, message (and exc when there is one)."""

    def __init__(self, node_id: str) -> None:
        super().__init__()
        self.node_id = node_id

    def format(self, record: logging.LogRecord) -> str:
        line = {"ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
                "level": record.levelname.lower(), "logger": record.name, "node": self.node_id,
                "message": record.getMessage()}
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line)


class UnsentAnswerFilter(logging.Filter):
    """gRPC logs an ERROR with a traceback when a call ends as its answer goes out: its caller is gone.

    That is a caller's timeout or a cut link, which the caller retries; a warning line says so.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR and str(record.msg).startswith(UNSENT_ANSWER):
            method = record.args[0] if isinstance(record.args, tuple) and record.args else "?"
            record.msg, record.args = "the answer to %s was not sent: its caller is gone", (method,)
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.exc_info = record.exc_text = None
        return True


def configure_logging(level: str, fmt: Literal["text", "json"], node_id: str) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter(node_id) if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in CHATTY:
        logging.getLogger(name).setLevel(logging.WARNING)
    logging.getLogger("grpc._cython.cygrpc").filters[:] = [UnsentAnswerFilter()]
