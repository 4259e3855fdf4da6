"""The configuration in the log (raft.membership): what a CONFIG_CHANGE entry holds, which configuration
a member uses as its log grows, is truncated and commits, and which changes are refused."""

from __future__ import annotations

import pytest

from raftlog.raft.config import Peer, parse_peers
from raftlog.raft.membership import ConfigLog, Configuration, MembershipError, Refusal, plan_change

SEED = Configuration(parse_peers("n1-10.0.0.1:9001;n2-10.0.0.2:9001;n3-10.0.0.3:9001"))
N4 = Peer("n4", "10.0.0.4:9001", learner=True, client_url="http://10.0.0.4:8001", grpc_address="10.0.0.4:7001")


def test_an_entry_holds_the_whole_member_list_and_decodes_to_it() -> None:
    config = plan_change(SEED, add=N4)
    decoded = Configuration.decode(config.encode(), index=42)
    assert decoded.members == config.members and decoded.index == 42
    assert decoded.member("n4") == N4 and decoded.voters == ("n1", "n2", "n3")


@pytest.mark.parametrize("body", [
    b"not json", b"[]", b'{"version": 2, "members": []}', b'{"version": 1}',
    b'{"version": 1, "members": [{"id": "n1", "peer_address": "h:1", "voter": "yes"}]}',
    b'{"version": 1, "members": [{"id": "n1", "peer_address": "h:1", "voter": false}]}',  # no voter
    b'{"version": 1, "members": [{"id": "n1", "peer_address": "h:1", "voter": true},'
    b' {"id": "n1", "peer_address": "h:2", "voter": true}]}',  # an id twice
])
def test_an_entry_that_is_no_configuration_is_refused(body: bytes) -> None:
    with pytest.raises(MembershipError) as refused:
        Configuration.decode(body, index=7)
    assert refused.value.reason is Refusal.BAD_CONFIG and "entry 7" in str(refused.value)


def test_a_member_uses_the_latest_configuration_and_falls_back_when_it_is_truncated() -> None:
    log = ConfigLog(SEED)
    added = Configuration(plan_change(SEED, add=N4).members, index=10)
    log.append(added)
    assert log.current == added and log.pending(committed_index=9)  # in force before it commits
    promoted = Configuration(plan_change(added, promote="n4").members, index=20)
    log.commit(10)
    assert log.base == added and not log.pending(committed_index=10)
    log.append(promoted)
    log.truncate(from_index=15)  # a new leader's log did not have entry 20
    assert log.current == added
    with pytest.raises(ValueError):
        log.append(Configuration(SEED.members, index=5))  # entries come in index order


def test_changes_that_would_break_the_group_are_refused() -> None:
    cases = [
        (dict(add=Peer("n1", "10.0.0.9:9001")), Refusal.MEMBER_EXISTS),
        (dict(add=Peer("n9", "10.0.0.1:9001")), Refusal.MEMBER_EXISTS),
        (dict(promote="n9"), Refusal.UNKNOWN_MEMBER),
        (dict(promote="n1"), Refusal.ALREADY_VOTER),
        (dict(remove="n9"), Refusal.UNKNOWN_MEMBER),
    ]
    for change, reason in cases:
        with pytest.raises(MembershipError) as refused:
            plan_change(SEED, **change)  # type: ignore[arg-type]
        assert refused.value.reason is reason
    alone = Configuration((Peer("n1", "h:1"), Peer("n2", "h:2", learner=True)))
    with pytest.raises(MembershipError) as refused:
        plan_change(alone, remove="n1")
    assert refused.value.reason is Refusal.LAST_VOTER
    assert plan_change(SEED, remove="n3").voters == ("n1", "n2")
