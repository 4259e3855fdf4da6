"""A node with a planted bug: `python -m tests.faults.node serve ...`, as `python -m app.cli serve ...`,
with RAFTLOG_TEST_MUTANT=NAME (one of tests.faults.mutants.ALL). Test-only: production code is not
changed; the bug is a monkeypatch made in this process before the node starts, and its marker line,
written to the node's log, shows the run it was there."""

from __future__ import annotations

import logging
import os
import sys

from raftlog.app.cli import main
from raftlog.app.logs import TEXT_FORMAT
from tests.faults.mutants import ENV, plant


def _say(line: str) -> None:
    """One line in the node's log format, before the node configures its logging."""
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    said = logging.getLogger("tests.faults.node")
    said.addHandler(handler)
    said.warning("%s", line)
    said.removeHandler(handler)
    handler.flush()


if __name__ == "__main__":
    _say(plant(os.environ[ENV]))
    sys.exit(main())
