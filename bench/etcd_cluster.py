"""A local 3-member etcd cluster on loopback, for the side-by-side benchmark.

Debian's `etcd-server` (installed by `make compare` when missing), default
settings (every write fsynced on a quorum, 100 ms heartbeat, 1 s election
timeout). Clients use its HTTP JSON gateway: `POST /v3/kv/put`,
`/v3/kv/txn` and `/v3/kv/range`, keys and values base64-encoded.
"""

from __future__ import annotations

import base64
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx

from raftlog.app.launcher import free_ports

START_TIMEOUT_S = 30.0


@dataclass
class EtcdMember:
    name: str
    client_port: int
    peer_port: int
    data_dir: Path
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    log_file: IO[bytes] | None = None

    @property
    def client_url(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"http://127.0.0.1:{self.peer_port}"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class EtcdCluster:
    def __init__(self, root: Path, nodes: int = 3) -> None:
        if shutil.which("etcd") is None:
            raise SystemExit("etcd is not installed: run `make compare`, or apt-get install etcd-server")
        ports = free_ports(2 * nodes)
        self.root = root
        self.members = {f"e{i + 1}": EtcdMember(f"e{i + 1}", ports[i], ports[nodes + i], root / f"e{i + 1}",
                                                root / f"e{i + 1}.log") for i in range(nodes)}
        self.initial = ",".join(f"{m.name}={m.peer_url}" for m in self.members.values())
        self._started: set[str] = set()

    def start_member(self, name: str) -> None:
        member = self.members[name]
        state = "existing" if name in self._started else "new"
        self.root.mkdir(parents=True, exist_ok=True)
        member.log_file = open(member.log_path, "ab")  # noqa: SIM115 - lives as long as the process
        member.process = subprocess.Popen(
            ["etcd", "--name", name, "--data-dir", str(member.data_dir),
             "--listen-client-urls", member.client_url, "--advertise-client-urls", member.client_url,
             "--listen-peer-urls", member.peer_url, "--initial-advertise-peer-urls", member.peer_url,
             "--initial-cluster", self.initial, "--initial-cluster-state", state,
             "--initial-cluster-token", "raftlog-bench"],
            stdout=member.log_file, stderr=subprocess.STDOUT)
        self._started.add(name)

    def start(self) -> None:
        for name in self.members:
            self.start_member(name)

    def stop_member(self, name: str, sig: int = signal.SIGTERM) -> None:
        member = self.members[name]
        if member.process is None:
            return
        member.process.send_signal(sig)
        try:
            member.process.wait(10)
        except subprocess.TimeoutExpired:
            member.process.kill()
            member.process.wait()
        member.process = None
        if member.log_file is not None:
            member.log_file.close()
            member.log_file = None

    def stop(self) -> None:
        for name in self.members:
            self.stop_member(name)

    def pids(self) -> dict[str, int]:
        return {n: m.process.pid for n, m in self.members.items() if m.process is not None}

    # -- the gateway ---------------------------------------------------------------------

    @staticmethod
    def post(member: EtcdMember, path: str, body: dict[str, Any], timeout: float = 2.0) -> dict[str, Any] | None:
        try:
            response = httpx.post(member.client_url + path, json=body, timeout=timeout)
        except httpx.HTTPError:
            return None
        return response.json() if response.status_code == 200 else None

    def leader(self) -> str | None:
        """The member every running member names as leader, if they agree."""
        by_id: dict[str, str] = {}
        named: set[str] = set()
        for name, member in self.members.items():
            if member.process is None:
                continue
            status = self.post(member, "/v3/maintenance/status", {}, timeout=1.0)
            if status is None:
                return None
            by_id[status["header"]["member_id"]] = name
            named.add(status.get("leader", "0"))
        if len(named) != 1:
            return None
        return by_id.get(named.pop())

    def wait_leader(self, timeout_s: float = START_TIMEOUT_S) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            leader = self.leader()
            if leader is not None and self.put(self.members[leader], b"ready", b"1"):
                return leader
            time.sleep(0.05)
        raise TimeoutError(f"no etcd leader within {timeout_s} s; see {self.root}/*.log")

    def put(self, member: EtcdMember, key: bytes, value: bytes, timeout: float = 2.0) -> bool:
        return self.post(member, "/v3/kv/put", {"key": b64(key), "value": b64(value)}, timeout) is not None
