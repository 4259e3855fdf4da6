"""The faults, each applied for a while and then healed, on a seeded schedule.

Each fault shows that it took effect (a killed process's exit status, a
stopped process's state, the proxy's counts of what it held, delayed or
refused, a member's own word on its disk, recovery's truncation, the repair
of the flipped entry, by its index); one that did nothing is a problem of the
run, not a pass. The damage it did to a member's files is recorded, so that
only that member's word on it, after it, is excused in the node logs.
"""

from __future__ import annotations

import math
import random
import re
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from raftlog.storage import read_checkpoint
from raftlog.storage.codec import ENTRY_MAGICS, HEADER, HEADER_SIZE
from tests.faults.harness import FaultCluster
from tests.faults.workload import FaultWindow, History, Op, open_session, send_append, send_read

FAILOVER_BOUND_S = 15.0  # after a fault that removes the leader, a write must succeed within this
RECOVERY_BOUND_S = 30.0  # after healing, the members must agree on a leader within this
EVIDENCE_S = 20.0  # how long a fault may take to show its effect (a scrub to find a flipped bit)
DISK_FULL = {"disk_space_ratio_to_check_expired": 0.01, "disk_space_ratio_to_force_clean": 0.02,
             "enable_disk_force_clean": False}  # any real disk is "full" for a node started with these

CHANNEL_BITS = (32 * 8, 36 * 8)  # the channel field's bits in an entry header

KINDS = ["kill_leader", "kill_random", "pause_leader", "isolate_leader", "refuse_leader", "halves", "ring",
         "one_way", "slow", "disk_full", "tail_cut", "bit_flip", "isolated_tail_cut", "replace_member"]
DISTURBANCE_WINDOWS = 3  # a removed member standing must disturb none of them
STOP_SHOWN_S = 2.0  # how long a SIGSTOP may take to show in /proc
# refusals of a membership change that say "not now": QUORUM_AT_RISK when a heartbeat round missed a voter (a
# stall of a loaded machine), as an operator would try again
RETRY_CHANGE = frozenset({"LEARNER_BEHIND", "CHANGE_IN_FLIGHT", "NOT_LEADER", "LEADER_TRANSFERRING", "SERVER_BUSY",
                          "NETWORK_ERROR", "WAIT_QUORUM_ACK_TIMEOUT", "TERM_CHANGED", "TIMEOUT", "QUORUM_AT_RISK"})
OPENED = re.compile(rb" opened \S+: log (-?\d+)\.\.(-?\d+),")  # app.node's line once the log is recovered
# a member's word on a damaged entry (the group's name for the index): a read or the scrub found it, recovery
# cut the log there; and its repair from a replica's copy
DAMAGE_SAID = (re.compile(rb"entry (\d+) is damaged on this member"),
               re.compile(rb"corrupt entry (\d+) .*cutting the log there"))
REPAIR_SAID = (re.compile(rb"entry (\d+) repaired from"), DAMAGE_SAID[1])
# the elector's lines on a step toward a new term, after their time: the group's own (a follower that lost its
# leader, a leader without a quorum), or another's (a member moved to a candidate's term, a leader deposed by it)
ELECTION_STEP = re.compile(rb"^(\S+ \S+) \S+ \S+ \S+ (?:(?P<own>lost leader|steps down in term \d+ \(no quorum\))"
                           rb"|steps down in term \d+ \(a larger term\)|is candidate in term)", re.MULTILINE)


@dataclass(frozen=True)
class Damage:
    """Entries first..last of a member's files damaged by a fault, before its log reached `offset` bytes."""

    member: str
    offset: int
    first: int
    last: float  # math.inf: every index from first on (a cut tail)

    def explains(self, member: str, offset: int, line: bytes) -> bool:
        """Whether this damage explains a line at `offset` of `member`'s log."""
        if member != self.member or offset < self.offset:
            return False
        said = next((m for pattern in DAMAGE_SAID if (m := pattern.search(line))), None)
        return said is not None and self.first <= int(said.group(1)) <= self.last


def election_of_its_own(logs: list[bytes]) -> bool:
    """Whether the first step toward a new term in these members' logs (by time) is one of the group's own."""
    steps = sorted((m.group(1), m.start(), m.group("own") is not None) for text in logs
                   for m in ELECTION_STEP.finditer(text))
    return bool(steps) and steps[0][2]


def said_of(patterns: tuple[re.Pattern[bytes], ...], index: int, text: bytes) -> bool:
    """Whether a line of `text` matches one of `patterns` for entry `index`."""
    return any(int(m.group(1)) == index for pattern in patterns for m in pattern.finditer(text))


@dataclass
class Nemesis:
    cluster: FaultCluster
    history: History
    rng: random.Random
    log: Callable[[str], None]
    faults: dict[str, int] = field(default_factory=dict)
    effective: dict[str, int] = field(default_factory=dict)  # faults that showed every effect, by kind
    failovers_ms: list[float] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    damage: list[Damage] = field(default_factory=list)  # what the faults did to members' files
    _probe: int = 0  # the probes' producer session: each probe is its next sequence
    _producer_id: int = field(default_factory=lambda: random.randrange(1, 2**63))
    _epoch: int | None = None  # of the probes' session, once a member opened it

    def can_apply(self, kind: str) -> bool:
        """Whether `kind` can be injected now: a replacement needs a spare machine, and a run of
        30 minutes has used them all long before its end."""
        return kind != "replace_member" or bool(self.cluster.spares)

    def apply(self, kind: str, hold_s: float) -> None:
        """Inject one fault, hold it, heal it, and wait until the cluster has a leader again."""
        self.faults[kind] = self.faults.get(kind, 0) + 1
        self._open_probe_session()  # while the group is whole: a failover's probe then only appends
        started, problems = time.monotonic(), len(self.problems)
        try:
            getattr(self, kind)(hold_s)
        finally:
            self.cluster.network.heal()
            self.history.faults.append(FaultWindow(kind, started, time.monotonic()))
        if len(self.problems) == problems:
            self.effective[kind] = self.effective.get(kind, 0) + 1
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
        self._kill("kill_leader", leader)
        self._failover(exclude={leader})
        time.sleep(hold_s)
        self.cluster.start_member(leader)

    def kill_random(self, hold_s: float) -> None:
        victim = self.rng.choice(self.cluster.group())
        self.log(f"  SIGKILL {victim}")
        self._kill("kill_random", victim)
        time.sleep(hold_s)
        self.cluster.start_member(victim)

    def pause_leader(self, hold_s: float) -> None:
        leader = self._leader()
        self.log(f"  SIGSTOP leader {leader}")
        self.cluster.pause(leader)
        self._shown("pause_leader", self._until(lambda: self.cluster.stopped(leader), STOP_SHOWN_S),
                    f"{leader} was sent SIGSTOP, and /proc does not say it stopped")
        probe = self._failover(exclude={leader})
        self._shown("pause_leader", probe is not None, f"no other member took a write while {leader} was stopped")
        time.sleep(hold_s)
        self.cluster.resume(leader)
        if probe is not None:  # it may still believe it leads: it must not answer from its own log
            self._stale_read(leader, probe)

    def isolate_leader(self, hold_s: float) -> None:
        """Hold everything between the leader and the rest, both ways, until healed."""
        self._cut_off_leader("isolate_leader", "partition", self.cluster.network.partition, hold_s)

    def refuse_leader(self, hold_s: float) -> None:
        """Reset the leader's peer connections, and every new one, both ways, until healed."""
        self._cut_off_leader("refuse_leader", "connections refused", self.cluster.network.refuse, hold_s)

    def _cut_off_leader(self, kind: str, what: str, cut: Callable[[set[str], set[str]], None], hold_s: float) -> None:
        leader = self._leader()
        rest = set(self.cluster.group()) - {leader}
        self.log(f"  {what} {{{leader}}} | {sorted(rest)}")
        before = self.cluster.network.effect()
        cut({leader}, rest)
        probe = self._failover(exclude={leader})
        if probe is not None:  # the old leader, cut off, must not serve a read of what it has not seen
            self._stale_read(leader, probe)
        time.sleep(hold_s)
        self._held(kind, before)

    def halves(self, hold_s: float) -> None:
        members = self.cluster.group()
        self.rng.shuffle(members)
        cut = len(members) // 2
        a, b = set(members[:cut]), set(members[cut:])
        self.log(f"  partition {sorted(a)} | {sorted(b)}")
        before = self.cluster.network.effect()
        self.cluster.network.partition(a, b)
        time.sleep(hold_s)
        self._held("halves", before)

    def ring(self, hold_s: float) -> None:
        """Each member reaches only its ring neighbours (5 members: every member sees a majority, no two
        the same); with 3 members, one pair is cut and the third bridges them."""
        members = self.cluster.group()
        self.rng.shuffle(members)
        n = len(members)
        if n >= 5:
            pairs = [(members[i], members[j]) for i in range(n) for j in range(i + 1, n)
                     if min(j - i, n - (j - i)) > 1]
        else:
            pairs = [(members[0], members[1])]
        self.log(f"  ring: cut {pairs}")
        before = self.cluster.network.effect()
        self.cluster.network.cut(pairs)
        time.sleep(hold_s)
        self._held("ring", before)

    def one_way(self, hold_s: float) -> None:
        leader = self._leader()
        other = self.rng.choice([m for m in self.cluster.group() if m != leader])
        src, dst = (leader, other) if self.rng.random() < 0.5 else (other, leader)
        self.log(f"  everything {src} sends {dst} is lost")
        before = self.cluster.network.effect()
        self.cluster.network.lose(src, dst)
        time.sleep(hold_s)
        self._held("one_way", before)

    def slow(self, hold_s: float) -> None:
        delay = self.rng.choice([0.02, 0.1, 0.3])
        members = self.cluster.group()
        pairs = [(a, b) for i, a in enumerate(members) for b in members[i + 1:]]
        self.log(f"  every link {delay * 1000:.0f} ms slower per chunk")
        before = self.cluster.network.effect()
        self.cluster.network.slow(pairs, delay)
        time.sleep(hold_s)
        self._held("slow", before)

    def disk_full(self, hold_s: float) -> None:
        victim = self.rng.choice(self.cluster.group())
        self.log(f"  {victim} restarted with a full disk")
        self.cluster.restart_with(victim, DISK_FULL)
        self._shown("disk_full", self._until(lambda: self._disk_full(victim)), f"{victim} never said its disk is full")
        time.sleep(hold_s)
        self.cluster.restart_with(victim, {})

    def tail_cut(self, hold_s: float) -> None:
        """SIGKILL a member and cut its last data file at a random byte within its last few entries (zeros
        after it): recovery must truncate the log there."""
        victim = self.rng.choice(self.cluster.group())
        self.cluster.kill_member(victim)
        cut = self._cut_tail(victim)
        time.sleep(hold_s)
        self._restart_truncated("tail_cut", victim, cut)

    def isolated_tail_cut(self, hold_s: float) -> None:
        """Two faults at once: a member cut off from the rest is killed, its tail cut, and restarted while
        still cut off; it must recover and catch up once the partition heals."""
        victim = self.rng.choice(self.cluster.group())
        rest = set(self.cluster.group()) - {victim}
        self.log(f"  partition {{{victim}}} | {sorted(rest)}, then {victim} killed with its tail cut")
        before = self.cluster.network.effect()
        self.cluster.network.partition({victim}, rest)
        time.sleep(hold_s / 2)
        self.cluster.kill_member(victim)
        cut = self._cut_tail(victim)
        self._restart_truncated("isolated_tail_cut", victim, cut)
        time.sleep(hold_s / 2)
        self._held("isolated_tail_cut", before)

    def replace_member(self, hold_s: float) -> None:
        """A member's machine dies; a fresh one (new ports, empty disk) joins as a learner, catches up, is
        promoted, and the dead one is removed, all under the writers' load. Then the dead one comes back
        with its old disk: removed while down, it never learned it, and stands for election again and
        again; the group must not notice."""
        if not self.cluster.spares:
            self._shown("replace_member", False, "no spare machine left")
            return
        leader = self._leader()
        victim = self.rng.choice([m for m in self.cluster.group() if m != leader])
        self._kill("replace_member", victim)
        new = self.cluster.join_spare(via=leader)
        self.history.membership_changes += 1  # it asks to be added
        self.log(f"  SIGKILL {victim}; {new.id} joins in its place")
        joined = self._until(lambda: self._configured(new.id), RECOVERY_BOUND_S)
        promoted = joined and self._until(
            lambda: self._change("POST", f"/v1/cluster/members/{new.id}/promote", "ALREADY_VOTER"), RECOVERY_BOUND_S)
        removed = promoted and self._until(
            lambda: self._change("DELETE", f"/v1/cluster/members/{victim}", "UNKNOWN_MEMBER"), RECOVERY_BOUND_S)
        self._shown("replace_member", removed, f"{new.id} did not join, was not promoted, or {victim} not removed")
        if removed:
            self.cluster.removed.add(victim)
        time.sleep(hold_s / 2)
        if not removed:
            self.cluster.start_member(victim)
            return
        self.log(f"  {victim}, removed, runs again")
        self.cluster.start_member(victim)
        stood = self._until(lambda: (self.cluster.status(victim) or {}).get("role") == "candidate")
        self._shown("replace_member", stood, f"{victim}, removed and running again, never stood for election")
        windows = [self._leadership_held(victim, hold_s / 2) for _ in range(DISTURBANCE_WINDOWS)] if stood else []
        for held, own, said in windows:
            if not held:
                self.log(f"  {'the group held an election of its own' if own else 'disturbed'}: {said}")
        disturbed = [said for held, own, said in windows if not held and not own]
        if disturbed:
            self.problems.append(f"{victim}, removed and running again, disturbed the group in {len(disturbed)} of "
                                 f"{len(windows)} windows: {'; '.join(disturbed)}")
        self._shown("replace_member", not stood or any(held for held, _, _ in windows),
                    f"the group held no window of {DISTURBANCE_WINDOWS} undisturbed by its own elections")

    def _leadership_held(self, stander: str, seconds: float) -> tuple[bool, bool, str]:
        """Whether the group keeps its leader and term for `seconds` while `stander` keeps standing; if
        not, whether its members' logs show an election of the group's own (a leader unheard, or one
        without a quorum: a stall of a loaded machine) rather than one the stander started."""
        leader = self._leader()
        before = self.cluster.status(leader)
        group = [m for m in self.cluster.running_ids() if m != stander]
        offsets = {m: self._log_size(m) for m in group}
        time.sleep(seconds)
        after = self.cluster.status(leader)
        standing = (self.cluster.status(stander) or {}).get("role") == "candidate"
        held = bool(before and after and (after["leader"], after["term"]) == (leader, before["term"]) and standing)
        own = not held and election_of_its_own([self._log_since(m, offsets[m]) for m in group])
        return held, own, (f"leader {leader} in term {before and before['term']}, then "
                           f"{after and (after['leader'], after['term'])}, {stander} standing: {standing}")

    def _configured(self, member_id: str) -> bool:
        """The group's configuration, as a running member of it says, holds `member_id`."""
        url = self.cluster.members[self.rng.choice(self.cluster.running_ids())].client_url
        try:
            said = httpx.get(f"{url}/v1/cluster/members", timeout=2).json()
        except (httpx.HTTPError, ValueError):
            return False
        return any(m["id"] == member_id for m in said.get("members", []))

    def _change(self, method: str, path: str, done_already: str) -> bool:
        """A membership change through a running member of the group: True once made (or found made: an
        answer lost before), False while the group cannot take it yet; any other refusal is a problem."""
        member = self.rng.choice(self.cluster.running_ids())
        self.history.membership_changes += 1
        try:
            answer = httpx.request(method, f"{self.cluster.members[member].client_url}{path}", timeout=15)
        except httpx.HTTPError:
            return False
        code = answer.json().get("error", {}).get("code") if answer.status_code != 200 else None
        if code is not None and code not in RETRY_CHANGE | {done_already}:
            self.problems.append(f"{method} {path} refused: {answer.text[:300]}")
        return answer.status_code == 200 or code == done_already

    def _cut_tail(self, victim: str) -> tuple[int, int] | None:
        """Cut the newest data file that holds entries inside its last entry; the indices of the first
        entry the cut reaches and of that last one."""
        for path in sorted((self.cluster.members[victim].data_dir / "data").iterdir(), reverse=True):
            data = path.read_bytes()
            entries = _entries(data)
            if entries:
                index, start, size = entries[-1]
                written = len(data[:start + size].rstrip(b"\0"))  # a cut among trailing zeros would change nothing
                cut = self.rng.randint(max(0, written - 4096), written - 1)
                self.log(f"  {victim} killed, {path.name} cut at byte {cut} of {written} written (last entry {index})")
                path.write_bytes(data[:cut] + bytes(len(data) - cut))
                return next(i for i, at, length in entries if at + length > cut), index
        self.log(f"  {victim} killed; it holds no entry to cut")
        return None

    def _restart_truncated(self, kind: str, victim: str, cut: tuple[int, int] | None) -> None:
        """Start the victim; recovery must say its log now ends before the entry that was cut."""
        offset = self._log_size(victim)
        last = None
        if cut is not None:
            self.damage.append(Damage(victim, offset, cut[0], math.inf))
            last = cut[1]
        self.cluster.start_member(victim)
        opened = self._until(lambda: OPENED.search(self._log_since(victim, offset)))
        end = int(opened.group(2)) if opened else None
        self._shown(kind, last is not None and end is not None and end < last,
                    f"{victim}'s log was cut inside entry {last}, and recovery says it ends at {end}")

    def bit_flip(self, hold_s: float) -> None:
        """SIGKILL a member and flip one bit of a committed entry in one of its data files: in the last
        files recovery finds it on open, in older ones the scrub or a read does, and the entry is repaired
        from a replica's copy (or cut away and fetched again). Not in the channel field, the one that
        DLedger's format covers by no CRC and no index record (raftlog writes 0)."""
        victim = self.rng.choice(self.cluster.group())
        self.cluster.kill_member(victim)
        member = self.cluster.members[victim]
        committed = read_checkpoint(member.data_dir / "checkpoint.db").committed_index
        candidates = []
        for path in sorted((member.data_dir / "data").iterdir()):
            data = path.read_bytes()
            candidates += [(path, data, e) for e in _entries(data) if e[0] <= committed]
        if not candidates:
            self.log(f"  {victim} killed; it holds no committed entry to flip")
            self._shown("bit_flip", False, f"{victim} held no committed entry to flip")
            self.cluster.start_member(victim)
            return
        path, data, (index, start, size) = self.rng.choice(candidates)
        bit = self.rng.choice([b for b in range(size * 8) if not CHANNEL_BITS[0] <= b < CHANNEL_BITS[1]])
        flipped = bytearray(data)
        flipped[start + bit // 8] ^= 1 << bit % 8
        path.write_bytes(bytes(flipped))
        self.log(f"  {victim} killed, bit {bit} of committed entry {index} flipped ({path.name})")
        time.sleep(hold_s)
        offset = self._log_size(victim)
        self.damage.append(Damage(victim, offset, index, index))
        self.cluster.start_member(victim)
        self._shown("bit_flip", self._until(lambda: said_of(REPAIR_SAID, index, self._log_since(victim, offset))),
                    f"the flipped bit in {victim}'s entry {index} was never found and repaired")

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

    def _kill(self, kind: str, member_id: str) -> None:
        code = self.cluster.stop_member(member_id, signal.SIGKILL)
        self._shown(kind, code == -signal.SIGKILL, f"{member_id} was to be killed, and exited with {code}")

    def _held(self, kind: str, before: int) -> None:
        """The links held, delayed or refused some traffic since `before`."""
        self._shown(kind, self.cluster.network.effect() > before, "the links it changed carried nothing to hold")

    def _shown(self, kind: str, took_effect: object, otherwise: str) -> None:
        if not took_effect:
            self.problems.append(f"{kind} did nothing: {otherwise}")
            self.log(f"  {kind} did nothing: {otherwise}")

    def _stale_read(self, member_id: str, probe: Op) -> None:
        """Read the write a new leader took from the member that led before: it must wait or refuse,
        never say the entry is not there (the checker judges the answer)."""
        op = Op("get", "nemesis", member_id, time.monotonic(), index=probe.index)
        with httpx.Client(timeout=3.0) as http:
            send_read(http, self.cluster.members[member_id].client_url, op)
        self.history.add(op)

    def _disk_full(self, member_id: str) -> bool:
        status = self.cluster.status(member_id)
        return bool(status and status.get("disk", {}).get("full"))

    def _log_size(self, member_id: str) -> int:
        path = self.cluster.members[member_id].log_path
        return path.stat().st_size if path.exists() else 0

    def _log_since(self, member_id: str, offset: int) -> bytes:
        with open(self.cluster.members[member_id].log_path, "rb") as f:
            f.seek(offset)
            return f.read()

    @staticmethod
    def _until(condition: Callable[[], object], timeout_s: float = EVIDENCE_S) -> object:
        """Poll a member's state until the condition holds; its last value."""
        deadline = time.monotonic() + timeout_s
        while not (value := condition()) and time.monotonic() < deadline:
            time.sleep(0.1)
        return value

    def _open_probe_session(self) -> None:
        """The probes' producer session, opened once through whichever running member answers."""
        deadline = time.monotonic() + RECOVERY_BOUND_S
        with httpx.Client(timeout=5.0) as http:
            while self._epoch is None and time.monotonic() < deadline:
                for member in self.cluster.running_ids():
                    self._epoch = open_session(http, self.cluster.members[member].client_url, self._producer_id)
                    if self._epoch is not None:
                        return
                time.sleep(0.1)

    def _failover(self, exclude: set[str]) -> Op | None:
        """Time from now until a write through the other members succeeds (a new leader serves);
        the write, acknowledged. One write, in the probes' producer session, sent through each member
        in turn until one answers it, as the writers do."""
        started = time.monotonic()
        urls = {m: self.cluster.members[m].client_url for m in self.cluster.group() if m not in exclude}
        op = Op("append", "nemesis", "", started, [f"probe-{self._probe}".encode()], sequence=self._probe)
        with httpx.Client(timeout=1.0) as http:
            while time.monotonic() - started < FAILOVER_BOUND_S:
                for member, url in urls.items():
                    if self._epoch is None:  # the session is opened first, through whoever answers
                        self._epoch = open_session(http, url, self._producer_id)
                        if self._epoch is None:
                            continue
                    op.member, op.outcome, op.code, op.attempts = member, "unknown", None, op.attempts + 1
                    send_append(http, url, op, self._producer_id, self._epoch)
                    if op.outcome == "ok" and op.complete is not None:
                        self.history.add(op)
                        self._probe += 1
                        took = (op.complete - started) * 1000
                        self.failovers_ms.append(took)
                        self.log(f"  a new leader took a write after {took:.0f} ms")
                        return op
                time.sleep(0.02)
        self.history.add(op)  # its outcome unknown: the next probe sends it again, in the same session
        self.problems.append(f"no write succeeded within {FAILOVER_BOUND_S:.0f} s of losing the leader")
        return None


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
