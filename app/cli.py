"""The `raftlog` command line."""

from __future__ import annotations

import argparse
from importlib.metadata import version


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="raftlog", description=__doc__)
    parser.add_argument("--version", action="version", version=f"raftlog {version('raftlog')}")
    parser.parse_args(argv)
    print(f"raftlog {version('raftlog')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
