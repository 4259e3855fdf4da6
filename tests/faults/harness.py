"""Real `raftlog serve` processes whose peer links run through the suite's proxies."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import httpx

from app.launcher import LocalCluster, Member
from tests.faults.proxy import Network


class FaultCluster(LocalCluster):
    """A LocalCluster in which member A reaches member B at the proxy of the link A->B."""

    def __init__(self, data_root: Path, nodes: int, settings: dict[str, Any]) -> None:
        super().__init__(data_root, nodes, settings=settings)
        self.network = Network({m.id: m.peer_port for m in self.members.values()})
        self.paused: set[str] = set()
        self.overrides: dict[str, dict[str, Any]] = {}  # settings of one member's next start
        self.stopping: set[str] = set()  # members being stopped on purpose: their exit is no crash

    def command(self, member: Member) -> list[str]:
        args = super().command(member)
        for name, value in self.overrides.get(member.id, {}).items():
            args += [f"--{name.replace('_', '-')}", str(value)]
        return args

    def restart_with(self, member_id: str, settings: dict[str, Any]) -> None:
        """Stop a member (SIGTERM) and start it again with these settings on top of the cluster's."""
        self.stop_member(member_id)
        self.overrides[member_id] = settings
        self.start_member(member_id)

    def peers_for(self, member: Member) -> str:
        return ";".join(f"{m.id}-127.0.0.1:{m.peer_port if m.id == member.id else self.network.port(member.id, m.id)}"
                        for m in self.members.values())

    def stop_member(self, member_id: str, sig: int = signal.SIGTERM) -> int | None:
        self.stopping.add(member_id)
        try:
            return super().stop_member(member_id, sig)
        finally:
            self.stopping.discard(member_id)

    def stop(self) -> None:
        self.stopping.update(self.members)
        for member_id in list(self.paused):
            self.resume(member_id)
        super().stop()
        self.network.close()

    # -- processes ---------------------------------------------------------------------------------

    def pause(self, member_id: str) -> None:
        process = self.members[member_id].process
        if process is not None and process.poll() is None:
            os.kill(process.pid, signal.SIGSTOP)
            self.paused.add(member_id)

    def resume(self, member_id: str) -> None:
        process = self.members[member_id].process
        if process is not None and process.poll() is None:
            os.kill(process.pid, signal.SIGCONT)
        self.paused.discard(member_id)

    def running_ids(self) -> list[str]:
        return [m for m, member in self.members.items() if member.running]

    # -- what the members say ------------------------------------------------------------------------

    def status(self, member_id: str, timeout_s: float = 1.0) -> dict[str, Any] | None:
        try:
            answer = httpx.get(f"{self.members[member_id].client_url}/v1/cluster", timeout=timeout_s)
            return answer.json() if answer.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None

    def leader(self) -> str | None:
        """The member that says it leads, when the running members that answer agree on it."""
        said = [s for m in self.running_ids() if m not in self.paused and (s := self.status(m, 0.5))]
        leaders = {s["leader"] for s in said if s.get("leader")}
        return leaders.pop() if len(leaders) == 1 else None
