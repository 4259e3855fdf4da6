"""A local cluster of separate node processes on loopback: `raftlog cluster`, and the
end-to-end tests' way to run real nodes.

Every child runs with PR_SET_PDEATHSIG, so even a launcher killed with
SIGKILL leaves no orphan node behind; `stop()` sends SIGTERM and waits, then
SIGKILLs whatever did not stop in time.
"""

from __future__ import annotations

import ctypes
import os
import random
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx

from raftlog.api.auth import token_entry

# For throwaway nodes (tests, generating openapi.yaml): files that reserve a MiB, not gigabytes
SECRET_SETTINGS = frozenset({"cluster_secret", "tokens"})
SMALL_FILES = {"data_file_size": 1 << 20, "index_file_size": 32 << 12, "max_entry_bytes": 64 << 10}

PR_SET_PDEATHSIG = 1
STOP_TIMEOUT_S = 10.0
POLL_S = 0.05
PORTS_FROM = 20000  # test clusters' ports: from here up to the ephemeral range
# this process's part of that range, (k, n): the k-th of n, for n processes that start clusters side by side
# (make test's workers): a port one has probed free may not be bound yet while the other probes it
PORTS_PART = (0, 1)


@dataclass
class Member:
    id: str
    client_port: int
    peer_port: int
    grpc_port: int
    data_dir: Path
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    log_file: IO[bytes] | None = field(default=None, repr=False)
    scheme: str = "http"
    join: str | None = None  # a member added later: the client URL it joins the group through
    settings: dict[str, Any] = field(default_factory=dict)  # this member's own, over the cluster's

    @property
    def client_url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.client_port}"

    @property
    def grpc_address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


_handed_out: set[int] = set()


def free_ports(count: int) -> list[int]:
    """Free ports below the kernel's ephemeral range, never the same one twice in a process.

    A port the kernel hands out for port 0 may be handed out again, or taken by an outgoing
    connection's local end, before a node binds it: below the ephemeral range neither happens.
    """
    with open("/proc/sys/net/ipv4/ip_local_port_range") as ranges:
        ephemeral_low = int(ranges.read().split()[0])
    part, parts = PORTS_PART
    width = (ephemeral_low - PORTS_FROM) // parts
    rng = random.Random()
    ports: list[int] = []
    while len(ports) < count:
        port = rng.randrange(PORTS_FROM + part * width, PORTS_FROM + (part + 1) * width)
        if port in _handed_out:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        ports.append(port)
    return ports


class LocalCluster:
    def __init__(self, data_root: Path, nodes: int = 3, *, client_ports: list[int] | None = None,
                 peer_ports: list[int] | None = None, grpc_ports: list[int] | None = None,
                 settings: dict[str, Any] | None = None,
                 learners: int = 0, verify: ssl.SSLContext | bool = True) -> None:
        if nodes < 1:
            raise ValueError("a cluster needs at least one node")
        self.data_root = Path(data_root)
        if client_ports is None or peer_ports is None or grpc_ports is None:
            ports = free_ports(3 * nodes)  # in one call: no port handed out twice
            client_ports = client_ports or ports[:nodes]
            peer_ports = peer_ports or ports[nodes:2 * nodes]
            grpc_ports = grpc_ports or ports[2 * nodes:]
        self.settings = settings or {}
        self.verify = verify  # how the launcher's own calls check HTTPS client ports
        self._http: httpx.Client | None = None  # the launcher's own calls: one client, made at first use
        scheme = "https" if self.settings.get("client_tls_cert") else "http"
        self.members = {
            f"n{i + 1}": Member(f"n{i + 1}", client_ports[i], peer_ports[i], grpc_ports[i],
                                self.data_root / f"n{i + 1}", self.data_root / f"n{i + 1}.log", scheme=scheme)
            for i in range(nodes)}
        learner_ids = set(list(self.members)[nodes - learners:]) if learners else set()
        self.peers = ";".join(f"{m.id}-127.0.0.1:{m.peer_port}{'@learner' if m.id in learner_ids else ''}"
                              for m in self.members.values())

    # -- processes -------------------------------------------------------------------------

    def peers_for(self, member: Member) -> str:
        """The peers string `member` starts with (fault tests route each member's links differently)."""
        return self.peers

    def add_member(self, join_via: str | None = None) -> Member:
        """A new member on free ports (not started yet): when started, it asks the group, through
        `join_via`'s client URL (default: the first member's), to add it as a learner."""
        number = len(self.members) + 1
        while f"n{number}" in self.members:
            number += 1
        member_id = f"n{number}"
        client_port, peer_port, grpc_port = free_ports(3)
        first = next(iter(self.members.values()))
        member = self.members[member_id] = Member(
            member_id, client_port, peer_port, grpc_port, self.data_root / member_id,
            self.data_root / f"{member_id}.log", scheme=first.scheme,
            join=self.members[join_via].client_url if join_via else first.client_url)
        return member

    def command(self, member: Member) -> list[str]:
        peers = self.peers_for(member) if member.join is None else f"{member.id}-127.0.0.1:{member.peer_port}"
        args = [sys.executable, "-m", "raftlog.app.cli", "serve", "--id", member.id, "--peers", peers,
                "--data-dir", str(member.data_dir), "--client-port", str(member.client_port),
                "--grpc-port", str(member.grpc_port)]
        if member.join is not None:
            args += ["--join", member.join]
        for name, value in {**self.settings, **member.settings}.items():
            if name not in SECRET_SETTINGS:
                args += [f"--{name.replace('_', '-')}", str(value)]
        return args

    def environment(self, member: Member) -> dict[str, str]:
        """Secrets go to a member in its environment: a command line is there for anyone to read (ps)."""
        secrets = {f"RAFTLOG_{name.upper()}": str(value) for name, value in self.settings.items()
                   if name in SECRET_SETTINGS}
        admin = next((token_entry(entry)[2] for entry in str(self.settings.get("tokens", "")).split(",")
                      if entry.startswith("admin:")), None)
        if member.join is not None and admin:
            secrets["RAFTLOG_JOIN_TOKEN"] = admin
        return secrets

    def start_member(self, member_id: str) -> Member:
        member = self.members[member_id]
        assert not member.running, f"{member_id} is already running"
        self.data_root.mkdir(parents=True, exist_ok=True)
        member.log_file = open(member.log_path, "ab")  # noqa: SIM115 - lives as long as the process
        member.process = subprocess.Popen(self.command(member), stdout=member.log_file, stderr=subprocess.STDOUT,
                                          env={**os.environ, **self.environment(member)},
                                          preexec_fn=_die_with_parent)
        return member

    def start(self) -> None:
        for member_id in self.members:
            self.start_member(member_id)

    def stop_member(self, member_id: str, sig: int = signal.SIGTERM) -> int | None:
        """Stop one node (SIGKILL for a crash); returns its exit code."""
        member = self.members[member_id]
        if member.process is None:
            return None
        if member.process.poll() is None:
            member.process.send_signal(sig)
        try:
            code = member.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            member.process.kill()
            code = member.process.wait()
        member.process = None
        if member.log_file is not None:
            member.log_file.close()
            member.log_file = None
        return code

    def kill_member(self, member_id: str) -> None:
        self.stop_member(member_id, signal.SIGKILL)

    def stop(self) -> None:
        for member in self.members.values():
            if member.running:
                assert member.process is not None
                member.process.send_signal(signal.SIGTERM)
        for member_id in self.members:
            self.stop_member(member_id)
        if self._http is not None:
            self._http.close()
            self._http = None

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- waiting ---------------------------------------------------------------------------

    def wait_healthy(self, member_id: str, timeout_s: float = 30.0) -> None:
        member = self.members[member_id]
        self._wait(lambda: self._get(member, "/healthz") is not None, timeout_s, f"{member_id} to answer",
                   [member])

    def wait_leader(self, timeout_s: float = 30.0, among: list[str] | None = None) -> str:
        """Wait until every running member (or those in `among`) is ready under one leader, and the
        leader has raised the cluster version to the level those members report (its entry is in the
        log: what comes next has indices of its own)."""
        ids = among or [m for m, member in self.members.items() if member.running]
        leaders: list[str | None] = []

        def agreed() -> bool:
            answers = [self._get(self.members[m], "/readyz") for m in ids]
            leaders[:] = [a.get("leader") if a and a.get("status") == "ready" else None for a in answers]
            return leaders[0] is not None and len(set(leaders)) == 1 and self._version_settled(leaders[0], ids)

        try:
            self._wait(agreed, timeout_s, f"one leader among {ids}",
                       [self.members[m] for m in ids if self.members[m].running])
        except TimeoutError as exc:
            raise TimeoutError(f"{exc} (last seen {leaders})") from None
        assert leaders[0] is not None
        return leaders[0]

    def _version_settled(self, leader: str, ids: list[str]) -> bool:
        if leader not in self.members:
            return True
        status = self._get(self.members[leader], "/v1/cluster")
        if status is None or "cluster_version" not in status:
            return status is not None  # a member of a release before levels: nothing to wait for
        levels = [m.get("level") for m in status["members"] if m["id"] in ids]
        return status["cluster_version"] >= min((level or 0 for level in levels), default=0)

    def _wait(self, condition: Callable[[], bool], timeout_s: float, what: str,
              watched: list[Member] | None = None) -> None:
        """Poll `condition`; a member of `watched` that exits meanwhile ends the wait with its log."""
        deadline = time.monotonic() + timeout_s
        while not condition():
            for member in watched or ():
                if not member.running:
                    raise RuntimeError(f"{member.id} exited; see {member.log_path}:\n{self.tail(member.id)}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out waiting for {what}")
            time.sleep(POLL_S)

    def _get(self, member: Member, path: str) -> dict[str, Any] | None:
        """A member's JSON answer, or None. One client serves every call: httpx.get makes a client, and
        loads the CA bundle, each time (about 50 ms here), and waiting for a leader asks every member."""
        if self._http is None:
            self._http = httpx.Client(timeout=1.0, verify=self.verify)
        try:
            return self._http.get(member.client_url + path).json()
        except (httpx.HTTPError, ValueError):
            return None

    def tail(self, member_id: str, lines: int = 30) -> str:
        path = self.members[member_id].log_path
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""


def _die_with_parent() -> None:
    """In the child: get SIGTERM when the launcher dies, however it dies."""
    os.setpgid(0, 0)  # a Ctrl-C in the terminal reaches the launcher, which stops the nodes in order
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
