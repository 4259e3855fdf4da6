"""Real `raftlog serve` processes whose peer links run through the suite's proxies; with a mutant, each
started through tests.faults.node, which plants the bug first."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import httpx

from raftlog.app.launcher import LocalCluster, Member
from tests.faults.mutants import ENV, planted_pids
from tests.faults.proxy import Network

SPARES = 3  # fresh machines a run may add to replace a member
NODE_MODULE = ["-m", "raftlog.app.cli"]
PLANTED_NODE_MODULE = ["-m", "tests.faults.node"]  # app.cli's main, with a bug planted first
STOPPED = "T"  # a process stopped by a signal, in /proc/PID/stat


class FaultCluster(LocalCluster):
    """A LocalCluster in which member A reaches member B at the proxy of the link A->B (A's `peer_routes`;
    the group's configuration holds every member's own peer port). Spare members, with proxies of their
    own links from the start, can join to replace a member; a removed member may be left running."""

    def __init__(self, data_root: Path, nodes: int, settings: dict[str, Any], mutant: str | None = None) -> None:
        super().__init__(data_root, nodes, settings=settings)
        self.mutant = mutant  # a bug of tests.faults.mutants planted in every node process started
        self.pids: dict[str, list[int]] = {}  # every process started, by member
        spare = LocalCluster(data_root, nodes + SPARES)  # its members n{nodes+1}... on free ports
        self.spares = [member for member_id, member in spare.members.items() if member_id not in self.members]
        self.removed: set[str] = set()  # members removed from the group, perhaps still running
        self.network = Network({m.id: m.peer_port for m in [*self.members.values(), *self.spares]})
        self.paused: set[str] = set()
        self.overrides: dict[str, dict[str, Any]] = {}  # settings of one member's next start
        self.stopping: set[str] = set()  # members being stopped on purpose: their exit is no crash

    def command(self, member: Member) -> list[str]:
        args = super().command(member)
        if self.mutant is not None:
            assert args[1:3] == NODE_MODULE, args
            args[1:3] = PLANTED_NODE_MODULE
        others = [m for m in [*self.members.values(), *self.spares] if m.id != member.id]
        args += ["--peer-routes", ";".join(f"{m.id}-127.0.0.1:{self.network.port(member.id, m.id)}" for m in others)]
        for name, value in self.overrides.get(member.id, {}).items():
            args += [f"--{name.replace('_', '-')}", str(value)]
        return args

    def environment(self, member: Member) -> dict[str, str]:
        return {**super().environment(member), **({ENV: self.mutant} if self.mutant is not None else {})}

    def start_member(self, member_id: str) -> Member:
        member = super().start_member(member_id)
        assert member.process is not None
        self.pids.setdefault(member_id, []).append(member.process.pid)
        return member

    def unplanted(self) -> list[str]:
        """The processes started with a mutant whose log has no line that says it was planted."""
        if self.mutant is None:
            return []
        missing = []
        for member_id, pids in self.pids.items():
            path = self.members[member_id].log_path
            text = path.read_text(errors="replace") if path.exists() else ""
            planted = planted_pids(self.mutant, text)
            missing += [f"{member_id} (pid {pid})" for pid in pids if pid not in planted]
        return missing

    def restart_with(self, member_id: str, settings: dict[str, Any]) -> None:
        """Stop a member (SIGTERM) and start it again with these settings on top of the cluster's."""
        self.stop_member(member_id)
        self.overrides[member_id] = settings
        self.start_member(member_id)

    def join_spare(self, via: str) -> Member:
        """A spare machine, empty, started to join the group through `via`'s client URL."""
        member = self.spares.pop(0)
        member.join = self.members[via].client_url
        self.members[member.id] = member
        self.start_member(member.id)
        return member

    def group(self) -> list[str]:
        """The members of the group: not those removed from it."""
        return [m for m in self.members if m not in self.removed]

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

    def stopped(self, member_id: str) -> bool:
        """The member's process is stopped (SIGSTOP took effect), as the kernel says."""
        process = self.members[member_id].process
        return process is not None and process_state(process.pid) == STOPPED

    def resume(self, member_id: str) -> None:
        process = self.members[member_id].process
        if process is not None and process.poll() is None:
            os.kill(process.pid, signal.SIGCONT)
        self.paused.discard(member_id)

    def running_ids(self) -> list[str]:
        return [m for m in self.group() if self.members[m].running]

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


def process_state(pid: int) -> str | None:
    """The state letter of /proc/PID/stat (R, S, T, Z, ...); None for a process that is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0]  # after the command's name, which may hold spaces
    except (FileNotFoundError, IndexError):
        return None
