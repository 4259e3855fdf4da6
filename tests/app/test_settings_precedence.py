"""Settings precedence (docs/operations.md, Configuration): command-line flags over the environment
(RAFTLOG_...) over the TOML file (`--config`) over the defaults.

Each layer is given a different value for the same setting, through the loader as `raftlog
serve` calls it and once through a real `raftlog serve` process, so a layer that wins out of
turn shows as the wrong value.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from raftlog.app.cli import _parser
from raftlog.app.launcher import SMALL_FILES, _die_with_parent, free_ports
from raftlog.app.settings import NodeSettings, load_settings
from tests.processes import eventually

LAYERS = ("flag", "env", "toml")
# per setting: the value each layer gives, and the default when none does
VALUES = {
    "flush_mode": ({"flag": "async", "env": "sync", "toml": "async"}, "sync"),
    "heartbeat_interval_ms": ({"flag": "111", "env": "222", "toml": 333}, 100),
    "group": ({"flag": "from-flag", "env": "from-env", "toml": "from-toml"}, "default"),
    "repair_from_peers": ({"flag": "false", "env": "true", "toml": False}, True),
}


def settings_of(argv: list[str]) -> NodeSettings:
    """What `raftlog serve ARGV` would run with: its own parser, then the loader as cli._serve calls it."""
    args = _parser().parse_args(["serve", *argv])
    values = {k.removeprefix("setting_"): v for k, v in vars(args).items()
              if k.startswith("setting_") and v is not None}
    return load_settings(values, args.config)


def toml_line(name: str, value: object) -> str:
    if isinstance(value, bool):
        return f"{name} = {str(value).lower()}"
    return f"{name} = {value!r}".replace("'", '"')


@pytest.mark.parametrize("given", [set(c) for n in range(4) for c in itertools.combinations(LAYERS, n)],
                         ids=lambda given: "+".join(sorted(given)) or "none")
@pytest.mark.parametrize("name", sorted(VALUES))
def test_the_highest_layer_given_wins(name: str, given: set[str], tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    values, default = VALUES[name]
    for var in [v for v in os.environ if v.startswith("RAFTLOG_")]:
        monkeypatch.delenv(var)
    argv = []
    if "flag" in given:
        argv += [f"--{name.replace('_', '-')}", values["flag"]]
    if "env" in given:
        monkeypatch.setenv(f"RAFTLOG_{name.upper()}", values["env"])
    if "toml" in given:
        toml = tmp_path / "node.toml"
        toml.write_text(toml_line(name, values["toml"]) + "\n")
        argv += ["--config", str(toml)]
    winner = next((layer for layer in LAYERS if layer in given), None)
    expected = default if winner is None else values[winner]
    got = getattr(settings_of(argv), name)
    assert str(got).lower() == str(expected).lower(), f"{name} from {sorted(given)}: {got!r}"


@pytest.fixture
def node(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], dict[str, int], Path]]:
    """A one-member `raftlog serve` whose client port comes from a different value in each layer."""
    ports = dict(zip(("flag", "env", "toml", "peer", "grpc"), free_ports(5), strict=True))
    toml = tmp_path / "node.toml"
    toml.write_text("\n".join([
        f"client_port = {ports['toml']}", 'flush_mode = "sync"', 'group = "from-toml"',
        *(toml_line(k, v) for k, v in SMALL_FILES.items())]) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAFTLOG_")}
    env.update(RAFTLOG_CLIENT_PORT=str(ports["env"]), RAFTLOG_FLUSH_MODE="async")
    log = tmp_path / "node.log"
    with open(log, "ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "raftlog.app.cli", "serve", "--config", str(toml), "--id", "n1",
             "--peers", f"n1-127.0.0.1:{ports['peer']}", "--data-dir", str(tmp_path / "n1"),
             "--client-port", str(ports["flag"]), "--grpc-port", str(ports["grpc"])],
            stdout=out, stderr=subprocess.STDOUT, env=env, preexec_fn=_die_with_parent)
    try:
        yield process, ports, log
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_a_real_serve_takes_flags_over_environment_over_toml(
        node: tuple[subprocess.Popen[bytes], dict[str, int], Path]) -> None:
    process, ports, log = node

    def cluster() -> dict[str, object] | None:
        assert process.poll() is None, log.read_text(errors="replace")
        try:
            return httpx.get(f"http://127.0.0.1:{ports['flag']}/v1/cluster", timeout=1).json()
        except httpx.HTTPError:
            return None

    status = eventually(cluster, "the node to answer on the flag's client port")
    assert status["flush_mode"] == "async"  # the environment's, over the file's sync
    assert status["group"] == "from-toml"  # only the file gives it
    for layer in ("env", "toml"):
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.1:{ports[layer]}/healthz", timeout=1)
