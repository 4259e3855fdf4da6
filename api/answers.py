"""What LogService answers, typed: each travels to the edge as it is, and is mapped there once, for
REST (api.schemas, the models openapi.yaml documents), for public gRPC (api.grpc_api) and for the
peer protocol (api.peer_codec), so an answer forwarded through another member arrives the same."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from raftlog.raft.membership import Configuration


@dataclass(frozen=True, slots=True)
class AppendAnswer:
    """A committed append: its entries' indices, their term and positions, and the leader that took it."""

    first_index: int
    last_index: int
    term: int
    positions: Sequence[int]
    leader: str


@dataclass(frozen=True, slots=True)
class MembershipAnswer:
    """A configuration, and whether the answering member knows it committed."""

    configuration: Configuration
    committed: bool

    def json(self) -> dict[str, Any]:
        """As the API shows it and `raftlog serve --join` reads it back (Configuration.decode_with_index)."""
        return {**json.loads(self.configuration.encode_with_index()), "committed": self.committed}

    @classmethod
    def from_json(cls, fields: dict[str, Any]) -> MembershipAnswer:
        """What `json` gave, back (a forwarded change's answer); ValueError if it is not that."""
        encoded = json.dumps({name: value for name, value in fields.items() if name != "committed"}).encode()
        return cls(Configuration.decode_with_index(encoded), fields.get("committed") is True)  # MembershipError


@dataclass(frozen=True, slots=True)
class TransferAnswer:
    """The target accepted and is taking leadership from `previous`."""

    leader: str
    previous: str

    def json(self) -> dict[str, Any]:
        return {"leader": self.leader, "previous": self.previous}

    @classmethod
    def from_json(cls, fields: dict[str, Any]) -> TransferAnswer:
        """What `json` gave, back (a forwarded transfer's answer); ValueError if it is not that."""
        leader, previous = fields.get("leader"), fields.get("previous")
        if not isinstance(leader, str) or not isinstance(previous, str):
            raise ValueError("a transfer's answer names the new leader and the previous one")
        return cls(leader, previous)
