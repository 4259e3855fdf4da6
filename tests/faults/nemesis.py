"""The faults, each applied for a while and then healed, on a seeded schedule."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from storage import read_checkpoint
from storage.codec import ENTRY_MAGICS, HEADER, HEADER_SIZE
from tests.faults.harness import FaultCluster
from tests.faults.workload import History, Op, send_append

FAILOVER_BOUND_S = 15.0  # after a fault that removes the leader, a write must succeed within this
RECOVERY_BOUND_S = 30.0  # after healing, the members must agree on a leader within this
DISK_FULL = {"disk_space_ratio_to_check_expired": 0.01, "disk_space_ratio_to_force_clean": 0.02,
             "enable_disk_force_clean": False}  # any real disk is "full" for a node started with these

CHANNEL_BITS = (32 * 8, 36 * 8)  # the channel field's bits in an entry header

KINDS = ["kill_leader", "kill_random", "pause_leader", "isolate_leader", "halves", "ring", "one_way", "slow",
         "disk_full", "tail_cut", "bit_flip"]


@dataclass
class Nemesis:
    cluster: FaultCluster
    history: History
    rng: random.Random
    log: Callable[[str], None]
    faults: dict[str, int] = field(default_factory=dict)
    failovers_ms: list[float] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    _probe: int = 0

    def apply(self, kind: str, hold_s: float) -> None:
        """Inject one fault, hold it, heal it, and wait until the cluster has a leader again."""
        self.faults[kind] = self.faults.get(kind, 0) + 1
        getattr(self, kind)(hold_s)
        self.cluster.network.heal()
        try:
            self.cluster.wait_leader(RECOVERY_BOUND_S, among=self.cluster.running_ids())
        except TimeoutError:
            said = {m: self._readyz(m) for m in self.cluster.running_ids()}
            self.problems.append(f"no leader {RECOVERY_BOUND_S:.0f} s after healing {kind}: {said}")
            self.log(f"  no leader {RECOVERY_BOUND_S:.0f} s after healing {kind}: {said}")

    # -- the faults --------------------------------------------------------------------------------

    def kill_leader(self, hold_s: float) -> None:
        leader = self._leader()
        self.log(f"  SIGKILL leader {leader}")
        self.cluster.kill_member(leader)
        self._failover(exclude={leader})
        time.sleep(hold_s)
        self.cluster.start_member(leader)

    def kill_random(self, hold_s: float) -> None:
        victim = self.rng.choice(list(self.cluster.members))
        self.log(f"  SIGKILL {victim}")
        self.cluster.kill_member(victim)
        time.sleep(hold_s)
        self.cluster.start_member(victim)

    def pause_leader(self, hold_s: float) -> None:
        leader = self._leader()
        self.log(f"  SIGSTOP leader {leader}")
        self.cluster.pause(leader)
        self._failover(exclude={leader})
        time.sleep(hold_s)
        self.cluster.resume(leader)

    def isolate_leader(self, hold_s: float) -> None:
        leader = self._leader()
        rest = set(self.cluster.members) - {leader}
        self.log(f"  partition {{{leader}}} | {sorted(rest)}")
        self.cluster.network.partition({leader}, rest)
        self._failover(exclude={leader})
        time.sleep(hold_s)

    def halves(self, hold_s: float) -> None:
        members = list(self.cluster.members)
        self.rng.shuffle(members)
        cut = len(members) // 2
        a, b = set(members[:cut]), set(members[cut:])
        self.log(f"  partition {sorted(a)} | {sorted(b)}")
        self.cluster.network.partition(a, b)
        time.sleep(hold_s)

    def ring(self, hold_s: float) -> None:
        """Each member reaches only its ring neighbours (5 members: every member sees a majority, no two
        the same); with 3 members, one pair is cut and the third bridges them."""
        members = list(self.cluster.members)
        self.rng.shuffle(members)
        n = len(members)
        if n >= 5:
            pairs = [(members[i], members[j]) for i in range(n) for j in range(i + 1, n)
                     if min(j - i, n - (j - i)) > 1]
        else:
            pairs = [(members[0], members[1])]
        self.log(f"  ring: cut {pairs}")
        self.cluster.network.cut(pairs)
        time.sleep(hold_s)

    def one_way(self, hold_s: float) -> None:
        leader = self._leader()
        other = self.rng.choice([m for m in self.cluster.members if m != leader])
        src, dst = (leader, other) if self.rng.random() < 0.5 else (other, leader)
        self.log(f"  everything {src} sends {dst} is lost")
        self.cluster.network.lose(src, dst)
        time.sleep(hold_s)

    def slow(self, hold_s: float) -> None:
        delay = self.rng.choice([0.02, 0.1, 0.3])
        members = list(self.cluster.members)
        pairs = [(a, b) for i, a in enumerate(members) for b in members[i + 1:]]
        self.log(f"  every link {delay * 1000:.0f} ms slower per chunk")
        self.cluster.network.slow(pairs, delay)
        time.sleep(hold_s)

    def disk_full(self, hold_s: float) -> None:
        victim = self.rng.choice(list(self.cluster.members))
        self.log(f"  {victim} restarted with a full disk")
        self.cluster.restart_with(victim, DISK_FULL)
        time.sleep(hold_s)
        self.cluster.restart_with(victim, {})

    def tail_cut(self, hold_s: float) -> None:
        """SIGKILL a member and cut its last data file at a random byte near its end (zeros after it)."""
        victim = self.rng.choice(list(self.cluster.members))
        self.cluster.kill_member(victim)
        path, data = _last_data_file(self.cluster.members[victim].data_dir)
        written = len(data.rstrip(b"\0"))
        cut = self.rng.randint(max(0, written - 4096), written)
        self.log(f"  {victim} killed, {path.name} cut at byte {cut} of {written} written")
        path.write_bytes(data[:cut] + bytes(len(data) - cut))
        time.sleep(hold_s)
        self.cluster.start_member(victim)

    def bit_flip(self, hold_s: float) -> None:
        """SIGKILL a member and flip one bit of a committed entry in one of its data files: in the last
        files recovery finds it on open, in older ones the scrub or a read does. Not in the channel
        field, the one that DLedger's format covers by no CRC and no index record (raftlog writes 0)."""
        victim = self.rng.choice(list(self.cluster.members))
        self.cluster.kill_member(victim)
        member = self.cluster.members[victim]
        committed = read_checkpoint(member.data_dir / "checkpoint.db").committed_index
        path = self.rng.choice(sorted((member.data_dir / "data").iterdir()))
        data = path.read_bytes()
        entries = [e for e in _entries(data) if e[0] <= committed]
        if entries:
            index, start, size = self.rng.choice(entries)
            bit = self.rng.choice([b for b in range(size * 8) if not CHANNEL_BITS[0] <= b < CHANNEL_BITS[1]])
            flipped = bytearray(data)
            flipped[start + bit // 8] ^= 1 << bit % 8
            path.write_bytes(bytes(flipped))
            self.log(f"  {victim} killed, bit {bit} of committed entry {index} flipped ({path.name})")
        else:
            self.log(f"  {victim} killed; {path.name} holds no committed entry to flip")
        time.sleep(hold_s)
        self.cluster.start_member(victim)

    # -- helpers -----------------------------------------------------------------------------------

    def _readyz(self, member_id: str) -> object:
        try:
            return httpx.get(f"{self.cluster.members[member_id].client_url}/readyz", timeout=1).json()
        except (httpx.HTTPError, ValueError) as exc:
            return type(exc).__name__

    def _leader(self) -> str:
        deadline = time.monotonic() + RECOVERY_BOUND_S
        while (leader := self.cluster.leader()) is None:
            if time.monotonic() > deadline:
                raise TimeoutError("no leader to aim the fault at")
            time.sleep(0.05)
        return leader

    def _failover(self, exclude: set[str]) -> None:
        """Time from now until a write through the other members succeeds (a new leader serves)."""
        started = time.monotonic()
        urls = {m: member.client_url for m, member in self.cluster.members.items() if m not in exclude}
        with httpx.Client(timeout=1.0) as http:
            while time.monotonic() - started < FAILOVER_BOUND_S:
                for member, url in urls.items():
                    self._probe += 1
                    op = Op("append", "nemesis", member, time.monotonic(), [f"probe-{self._probe}".encode()])
                    send_append(http, url, op)
                    self.history.add(op)
                    if op.outcome == "ok" and op.complete is not None:
                        took = (op.complete - started) * 1000
                        self.failovers_ms.append(took)
                        self.log(f"  a new leader took a write after {took:.0f} ms")
                        return
                time.sleep(0.02)
        self.problems.append(f"no write succeeded within {FAILOVER_BOUND_S:.0f} s of losing the leader")


def _last_data_file(data_dir: Path) -> tuple[Path, bytes]:
    path = sorted((data_dir / "data").iterdir())[-1]
    return path, path.read_bytes()


def _entries(data: bytes) -> list[tuple[int, int, int]]:
    """(index, offset, size) of the entries a data file starts with, up to the first that is not one."""
    found, offset = [], 0
    while offset + HEADER_SIZE <= len(data):
        magic, size, index, *_ = HEADER.unpack_from(data, offset)
        if magic not in ENTRY_MAGICS or size < HEADER_SIZE or offset + size > len(data):
            break
        found.append((index, offset, size))
        offset += size
    return found
