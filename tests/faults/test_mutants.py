"""Planting a bug in a node process: every mutant still applies to the code it names, and the entry
module plants it and says so in the node's log."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.faults.mutants import ALL, ENV, plant, planted_pids
from tests.faults.mutation import SIMULATION_ONLY


@pytest.mark.parametrize("name", sorted(ALL))
def test_each_mutant_replaces_what_it_names(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    owner, attribute, _ = ALL[name]
    original = getattr(owner, attribute)
    monkeypatch.setattr(owner, attribute, original)  # undone after the test
    assert plant(name) == f"mutant {name} planted in process {os.getpid()}"
    assert getattr(owner, attribute) is not original


def test_the_simulation_keeps_only_mutants_that_exist() -> None:
    assert set(SIMULATION_ONLY) <= set(ALL)


def test_the_node_entry_plants_the_mutant_and_says_so_before_the_node_runs() -> None:
    with subprocess.Popen([sys.executable, "-m", "tests.faults.node", "--version"], stdout=subprocess.PIPE, text=True,
                          env={**os.environ, ENV: "reads-local-commit-index"}) as node:
        said, _ = node.communicate(timeout=60)
    assert node.returncode == 0
    assert said.startswith("20")  # a line in the node's log format, then the command's own output
    assert planted_pids("reads-local-commit-index", said) == {node.pid}
    assert said.splitlines()[-1].startswith("raftlog ")
    assert planted_pids("votes-twice", said) == set()


def test_a_node_asked_for_an_unknown_mutant_does_not_start() -> None:
    node = subprocess.run([sys.executable, "-m", "tests.faults.node", "--version"], capture_output=True, text=True,
                          env={**os.environ, ENV: "no-such-bug"}, timeout=60)
    assert node.returncode != 0 and "no-such-bug" in node.stderr
