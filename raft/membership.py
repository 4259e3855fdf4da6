"""The group's configuration, as it lives in the log (issue 20; Ongaro's thesis, chapter 4).

A CONFIG_CHANGE entry (DLedger's magic 3) holds the whole new member list.
A member uses the latest configuration in its log, committed or not, as the
thesis prescribes; when that entry is truncated away it falls back to the one
before. Changes go one at a time, one voter at a time (single-server changes:
the majorities of the old and the new configuration always overlap), and
never while the previous change or the leader's NOOP of its term is
uncommitted (the fix the thesis's errata give).

This module is pure: it encodes and decodes configurations, keeps the ones
the log holds (`ConfigLog`), and plans a change (`plan_change`). The node
decides when to append and when to apply.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import Enum

from raftlog.raft.config import LEARNER_MARK, Peer
from raftlog.raft.tables import LogTable
from raftlog.storage.codec import Magic

log = logging.getLogger("raftlog.raft.membership")

FORMAT_VERSION = 1
SEED_INDEX = -1  # the configuration from the `peers` setting, before any CONFIG_CHANGE entry


class MembershipError(ValueError):
    """A change refused before anything is written: `reason` is stable, the message says why."""

    def __init__(self, reason: Refusal, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class Refusal(Enum):
    MEMBER_EXISTS = "an id or address that is already a member's"
    UNKNOWN_MEMBER = "no member has this id"
    ALREADY_VOTER = "the member votes already"
    LAST_VOTER = "the change would leave no voter"
    BAD_CONFIG = "a CONFIG_CHANGE entry that does not decode"
    CHANGE_IN_FLIGHT = "the previous change, or the leader's first entry of its term, is not committed yet"
    LEARNER_BEHIND = "the learner lags the leader by more than max_promote_lag_entries"
    QUORUM_AT_RISK = "the voters that answer now would be short of a quorum of the new configuration"


@dataclass(frozen=True, slots=True)
class Configuration:
    """The members, and the index of the entry that set them (SEED_INDEX: from the settings)."""

    members: tuple[Peer, ...]
    index: int = SEED_INDEX

    @property
    def voters(self) -> tuple[str, ...]:
        return tuple(m.id for m in self.members if not m.learner)

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(m.id for m in self.members)

    def member(self, member_id: str) -> Peer | None:
        return next((m for m in self.members if m.id == member_id), None)

    def quorum(self) -> int:
        """More than half of the voters (DLedger's MemberState.isQuorum)."""
        return len(self.voters) // 2 + 1

    def encode(self) -> bytes:
        """The body of its CONFIG_CHANGE entry (the index is where the entry lands, not in the body)."""
        return _dumps(self._fields())

    def encode_with_index(self) -> bytes:
        """The configuration and the entry that set it, as a snapshot install carries it."""
        return _dumps({**self._fields(), "index": self.index})

    def _fields(self) -> dict[str, object]:
        return {"version": FORMAT_VERSION, "members": [
            {"id": m.id, "peer_address": m.address, "voter": not m.learner, "client_url": m.client_url,
             "grpc_address": m.grpc_address} for m in self.members]}

    def same_members(self, other: Configuration) -> bool:
        """Who is in it, at which addresses and with which role: the index aside."""
        return sorted(self.members, key=lambda m: m.id) == sorted(other.members, key=lambda m: m.id)

    @classmethod
    def decode_with_index(cls, body: bytes | memoryview) -> Configuration:
        """What `encode_with_index` wrote; MembershipError if it is not that."""
        try:
            index = json.loads(bytes(body))["index"]
            if not isinstance(index, int) or isinstance(index, bool):
                raise ValueError(f"index {index!r}")
        except (ValueError, TypeError, KeyError) as exc:
            raise MembershipError(Refusal.BAD_CONFIG, f"not a configuration with its index ({exc})") from None
        return cls.decode(body, index)

    @classmethod
    def decode(cls, body: bytes | memoryview, index: int) -> Configuration:
        """The configuration a CONFIG_CHANGE entry at `index` sets; MembershipError if it is not one."""
        try:
            raw = json.loads(bytes(body))
            if raw.get("version") != FORMAT_VERSION:
                raise ValueError(f"version {raw.get('version')!r}")
            members = tuple(Peer(_text(m["id"]), _text(m["peer_address"]), not _flag(m["voter"]),
                                 _text_or_none(m.get("client_url")), _text_or_none(m.get("grpc_address")))
                            for m in raw["members"])
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise MembershipError(Refusal.BAD_CONFIG, f"entry {index}: not a configuration ({exc})") from None
        config = cls(members, index)
        _check(config, Refusal.BAD_CONFIG, f"entry {index}: ")
        return config


class ConfigLog:
    """The configurations a member's log holds: the one in force at its base (committed, and carried by
    the checkpoint or snapshot when cleaning removes its entry), and those of later entries, in order."""

    def __init__(self, base: Configuration) -> None:
        self.base = base
        self._later: list[Configuration] = []

    @property
    def current(self) -> Configuration:
        """The latest configuration in the log, committed or not: the one a member uses."""
        return self._later[-1] if self._later else self.base

    @property
    def members(self) -> dict[str, Peer]:
        """Every member of a configuration still in play (the base's and the later ones'), the
        latest word on each: a leader keeps replicating to a member until its removal commits."""
        return {m.id: m for config in (self.base, *self._later) for m in config.members}

    def append(self, config: Configuration) -> None:
        if config.index <= self.current.index:
            raise ValueError(f"configuration of entry {config.index} after that of entry {self.current.index}")
        self._later.append(config)

    def truncate(self, from_index: int) -> bool:
        """Entries from `from_index` on left the log: so did their configurations. True if any did."""
        before = len(self._later)
        while self._later and self._later[-1].index >= from_index:
            self._later.pop()
        return len(self._later) != before

    def commit(self, committed_index: int) -> bool:
        """The latest configuration at or below the commit index becomes the base: a committed
        configuration never leaves the log, and those before it are of no use any more. True if
        the base moved."""
        moved = False
        while self._later and self._later[0].index <= committed_index:
            self.base, moved = self._later.pop(0), True
        return moved

    def reset(self, base: Configuration) -> None:
        """The log restarts after a snapshot: `base` is the committed configuration it came with."""
        self.base, self._later = base, []

    def pending(self, committed_index: int) -> bool:
        """A change is in the log and not committed yet: the next one must wait (one at a time)."""
        return self.current.index > committed_index


def describe_members(config: Configuration) -> str:
    """The members as the `peers` setting writes them: `n0-host:port;n3-host:port@learner`."""
    return ";".join(f"{m.id}-{m.address}{LEARNER_MARK if m.learner else ''}" for m in config.members)


def saved_configuration(index: int, body: bytes | None) -> Configuration | None:
    """The configuration a checkpoint saved with `save_config` (None: none yet; the `peers` setting
    holds the first)."""
    return None if body is None or index < 0 else Configuration.decode(body, index)


def plan_change(current: Configuration, *, add: Peer | None = None, promote: str | None = None,
                remove: str | None = None) -> Configuration:
    """The configuration one change makes of `current` (its index set when the entry is appended);
    MembershipError when the change is refused. One change at a time, one voter at a time."""
    if sum(x is not None for x in (add, promote, remove)) != 1:
        raise ValueError("one change at a time: add, promote or remove")
    members = list(current.members)
    if add is not None:
        taken = next((m for m in members if m.id == add.id or m.address == add.address), None)
        if taken is not None:
            what = "id" if taken.id == add.id else "address"
            raise MembershipError(Refusal.MEMBER_EXISTS, f"{add.id} ({add.address}): its {what} is {taken.id}'s")
        members.append(add)
    else:
        target = promote if promote is not None else remove
        found = current.member(str(target))
        if found is None:
            raise MembershipError(Refusal.UNKNOWN_MEMBER, f"{target!r} is not a member of this group")
        if promote is not None:
            if not found.learner:
                raise MembershipError(Refusal.ALREADY_VOTER, f"{promote} is a voter already")
            members[members.index(found)] = replace(found, learner=False)
        else:
            members.remove(found)
    config = Configuration(tuple(members), current.index)
    _check(config, Refusal.LAST_VOTER)
    return config


def _check(config: Configuration, reason: Refusal, where: str = "") -> None:
    ids, addresses = config.ids, [m.address for m in config.members]
    if len(set(ids)) != len(ids) or len(set(addresses)) != len(addresses):
        raise MembershipError(reason, f"{where}a configuration lists an id or an address twice")
    if not config.voters:
        raise MembershipError(reason, f"{where}a configuration needs at least one voter")


def _dumps(fields: dict[str, object]) -> bytes:
    return json.dumps(fields, separators=(",", ":"), sort_keys=True).encode()


def _text(value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{value!r} is not a name")
    return value


def _text_or_none(value: object) -> str | None:
    return None if value is None else _text(value)


def _flag(value: object) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{value!r} is not true or false")
    return value


class ConfigurationTable(LogTable):
    """The configurations as a table of the log: each in force from its append on, committed or not (a vote
    may depend on one), taken back by a truncation. Saved apart from the other tables: the committed one in
    the checkpoint's configuration column (raft.apply), and sent in a snapshot install's data."""

    name = "configurations"
    magics = frozenset((Magic.CONFIG_CHANGE,))
    checkpointed = sent = False

    def __init__(self, self_id: str, members: ConfigLog, changed: Callable[[], None]) -> None:
        self.self_id = self_id
        self.members = members
        self.changed = changed  # the member follows the configurations in play

    def appended(self, index: int, magic: int, body: bytes | memoryview) -> None:
        if index <= self.members.current.index:
            return  # known already: a snapshot install brought it
        try:
            self.members.append(Configuration.decode(body, index))
        except MembershipError as exc:
            log.error("%s: configuration entry %d not taken: %s", self.self_id, index, exc)
            return
        self.changed()

    def truncated(self, from_index: int) -> None:
        if self.members.truncate(from_index):
            self.changed()
