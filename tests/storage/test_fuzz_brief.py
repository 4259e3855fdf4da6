"""The fuzz targets of `make fuzz` (tests/storage/fuzz_codec.py), briefly, on the plain build: each fed a
few thousand inputs from a seeded random generator and whatever corpus `make fuzz` has kept, and, where
atheris is installed, run by atheris for a few thousand coverage-guided inputs in a child process
(libFuzzer ends the process it runs in). Neither needs clang."""

from __future__ import annotations

import importlib.util
import random
import subprocess
import sys
from pathlib import Path

import pytest

from raftlog.storage import codec
from tests.storage.fuzz_codec import TARGETS
from tests.storage.fuzz_run import ROOT, seed

INPUTS = 3000  # per target, from the random generator
CORPUS_MAX = 500  # per target, from make fuzz's corpus
RUNS = 3000  # per target, under atheris

pytestmark = pytest.mark.skipif(codec.compiled is None, reason="the compiled codec is not built")


def inputs(target: str) -> list[bytes]:
    rng = random.Random(f"test_fuzz_brief {target}")
    generated = [rng.randbytes(rng.choice((0, 8, 32, 128, 512, 2048))) for _ in range(INPUTS)]
    corpus = ROOT / "build" / "fuzz" / "corpus" / target
    kept = sorted(corpus.iterdir())[:CORPUS_MAX] if corpus.is_dir() else []
    return generated + [path.read_bytes() for path in kept]


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_a_fuzz_target_finds_nothing_in_a_few_thousand_inputs(target: str) -> None:
    for data in inputs(target):
        try:
            TARGETS[target](data)
        except AssertionError as exc:
            raise AssertionError(f"{target} on {data.hex()}: {exc}") from exc


@pytest.mark.skipif(importlib.util.find_spec("atheris") is None, reason="atheris is not installed")
@pytest.mark.parametrize("target", sorted(TARGETS))
def test_atheris_finds_nothing_in_a_few_thousand_runs(target: str, tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    seed(corpus, target)
    run = subprocess.run([sys.executable, "-m", "tests.storage.fuzz_codec", "--target", target, "--seconds", "60",
                          "--corpus", str(corpus), f"-runs={RUNS}", "-seed=1",
                          f"-artifact_prefix={tmp_path}/"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert f"stat::number_of_executed_units: {RUNS}" in run.stderr
