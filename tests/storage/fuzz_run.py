"""`make fuzz`: each target of tests/storage/fuzz_codec.py under atheris, in a child process of its own,
for a share of --seconds. With clang, the extension is built again with AddressSanitizer and libFuzzer's
coverage (-fsanitize=address,fuzzer-no-link) into --dir, and the children run it under an ASan runtime
with libFuzzer linked in (atheris's asan_with_fuzzer.so, made here from clang's archives: the wheel ships
none), with Python's allocator off so ASan sees every buffer. Without clang the plain build is fuzzed.

    python -m tests.storage.fuzz_run --seconds 300 [--targets a,b] [--dir build/fuzz] [--no-asan]

Each target keeps its corpus in DIR/corpus/TARGET (seeded the first time), its log in DIR/TARGET.log,
and a finding in DIR/artifacts/TARGET-crash-...: replay one with
`python -m tests.storage.fuzz_codec --target TARGET FILE` (under the same LD_PRELOAD for an ASan one).
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

from tests.storage.fuzz_codec import TARGETS

ROOT = Path(__file__).resolve().parents[2]
SEEDS = 64  # random inputs a new corpus starts from (the fuzzer grows its own from them)
ASAN_OPTIONS = "detect_leaks=0:allocator_may_return_null=1:quarantine_size_mb=64:symbolize=1"


def clang_library(name: str) -> Path | None:
    """A compiler-rt library clang links with, if it is there."""
    found = subprocess.run(["clang", f"-print-file-name={name}"], capture_output=True, text=True).stdout.strip()
    return Path(found) if os.path.isabs(found) and os.path.exists(found) else None


def build_asan(out: Path) -> tuple[Path, Path]:
    """(the ASan runtime with libFuzzer to preload, the extension built with ASan and coverage)."""
    out.mkdir(parents=True, exist_ok=True)
    asan, fuzzer = clang_library("libclang_rt.asan-x86_64.a"), clang_library("libclang_rt.fuzzer_no_main-x86_64.a")
    if asan is None or fuzzer is None:
        raise RuntimeError("clang's compiler-rt archives are missing (Debian: libclang-rt-N-dev)")
    runtime, archive = out / "asan_with_fuzzer.so", out / "asan.a"
    shutil.copyfile(asan, archive)  # less its preinit member: a shared library has no .preinit_array
    members = subprocess.run(["ar", "t", str(archive)], check=True, capture_output=True, text=True).stdout.split()
    subprocess.run(["ar", "d", str(archive), *[m for m in members if "preinit" in m]], check=True)
    subprocess.run(["clang++", "-shared", "-o", str(runtime), "-Wl,--whole-archive", str(fuzzer), str(archive),
                    "-Wl,--no-whole-archive", "-lpthread", "-ldl"], check=True)
    extension = out / f"_codec{sysconfig.get_config_var('EXT_SUFFIX')}"
    subprocess.run(["clang", "-shared", "-fPIC", "-g", "-O1", "-fno-omit-frame-pointer",
                    "-fsanitize=address,fuzzer-no-link", f"-I{sysconfig.get_paths()['include']}",
                    str(ROOT / "storage" / "_codec.c"), "-lz", "-o", str(extension)], check=True)
    return runtime, extension


def seed(corpus: Path, target: str) -> None:
    """A new corpus's first inputs: random bytes of a few lengths, from a seed per target."""
    corpus.mkdir(parents=True, exist_ok=True)
    if any(corpus.iterdir()):
        return
    rng = random.Random(f"fuzz_codec {target}")
    for i in range(SEEDS):
        (corpus / f"seed-{i:02d}").write_bytes(rng.randbytes(rng.choice((16, 64, 256, 1024, 4096))))


def fuzz(target: str, seconds: int, out: Path, asan: tuple[Path, Path] | None) -> tuple[bool, str]:
    """One target's run: whether it found nothing, and its closing line."""
    corpus, log = out / "corpus" / target, out / f"{target}.log"
    seed(corpus, target)
    (out / "artifacts").mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if asan is not None:
        env.update(LD_PRELOAD=str(asan[0]), RAFTLOG_FUZZ_CODEC=str(asan[1]), PYTHONMALLOC="malloc",
                   ASAN_OPTIONS=ASAN_OPTIONS)
    command = [sys.executable, "-m", "tests.storage.fuzz_codec", "--target", target, "--seconds", str(seconds),
               "--corpus", str(corpus), f"-artifact_prefix={out / 'artifacts'}/{target}-"]
    started = time.monotonic()
    with log.open("w") as sink:
        code = subprocess.run(command, cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT).returncode
    text = log.read_text(errors="replace")
    runs = re.search(r"stat::number_of_executed_units: (\d+)", text)
    cover = re.findall(r"cov: (\d+) ft: (\d+)", text)
    line = (f"{target}: {runs.group(1) if runs else '?'} executions in {time.monotonic() - started:.0f} s, "
            f"coverage {cover[-1][0] if cover else '?'} edges ({cover[-1][1] if cover else '?'} features), "
            f"ASan {'on' if asan is not None else 'off'}, exit {code}")
    if code != 0:
        print("\n".join(text.splitlines()[-60:]), file=sys.stderr)
    return code == 0, line


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=300, help="in all, shared among the targets")
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--dir", type=Path, default=ROOT / "build" / "fuzz")
    parser.add_argument("--no-asan", action="store_true", help="fuzz the plain build even where clang is")
    args = parser.parse_args(argv)
    targets = [t for t in args.targets.split(",") if t]
    unknown = set(targets) - set(TARGETS)
    if unknown:
        parser.error(f"no such target: {', '.join(sorted(unknown))} (there are {', '.join(TARGETS)})")
    asan = None
    if args.no_asan or shutil.which("clang") is None:
        print("fuzz_run: no clang (or --no-asan): the plain build, without AddressSanitizer", flush=True)
    else:
        asan = build_asan(args.dir / "asan")
        print(f"fuzz_run: AddressSanitizer build {asan[1]}, preloading {asan[0]}", flush=True)
    share = max(1, args.seconds // len(targets))
    results = []
    for target in targets:
        print(f"fuzz_run: {target} for {share} s (log {args.dir / f'{target}.log'})", flush=True)
        results.append(fuzz(target, share, args.dir, asan))
        print(results[-1][1], flush=True)
    print("fuzz_run: " + ("no finding" if all(ok for ok, _ in results) else
                          f"findings in {args.dir / 'artifacts'} (the logs say which)"))
    return 0 if all(ok for ok, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
