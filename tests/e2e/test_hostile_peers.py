"""Hostile peer input on a live follower, past the cluster secret: pushes whose numbers cannot be
true are answered UNEXPECTED_ARGUMENT at once (never a loop on the event loop, never a stream left
without its answer), and the follower's log and its replication go on untouched (DESIGN, Security
posture: hostile peer input is refused in constant time with an answer)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest

from raftlog.api.peer_codec import decode_message, encode_push
from raftlog.app.launcher import SMALL_FILES, LocalCluster
from raftlog.raft.messages import Code, PushRequest, PushResponse, PushType
from raftlog.storage.codec import HEADER, HEADER_SIZE
from tests.e2e.peer_port import replicate
from tests.processes import serving

SECRET = "cluster-secret-0123456789abcdef"
FILE_BYTES = SMALL_FILES["data_file_size"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from serving(tmp_path_factory.mktemp("hostile-peers"), 3, settings={**SMALL_FILES, "cluster_secret": SECRET})


def header(size: int) -> bytes:
    """An entry header claiming `size` bytes (NORMAL magic, the rest zeros)."""
    return HEADER.pack(1, size, 0, 0, 0, 0, 0, 0, 0)


def impossible_pushes(end: int) -> dict[str, dict[str, Any]]:
    """Pushes no leader sends, as PushRequest fields, for a follower whose log ends at `end`."""
    return {
        # entries of size 0 ending before the log: the lost-ack check's walk to the last one never moved on
        "a first index before 0": {"type": PushType.APPEND, "first_index": -(1 << 40), "count": (1 << 31) - 1,
                                   "data": header(0)},
        "more entries than bytes": {"type": PushType.APPEND, "first_index": end + 1, "count": 10,
                                    "data": header(HEADER_SIZE) * 2},
        "a negative entry size": {"type": PushType.APPEND, "first_index": 0, "count": end + 2,
                                  "data": header(-HEADER_SIZE) * (end + 2)},
        "an entry larger than the push": {"type": PushType.APPEND, "first_index": 0, "count": end + 2,
                                          "data": header(1 << 30) * (end + 2)},
        "a snapshot position no log can start at": {"type": PushType.INSTALL_SNAPSHOT, "pre_log_index": end + 1000,
                                                    "pre_log_term": 1, "next_pos": FILE_BYTES - 10},
        "a negative snapshot position": {"type": PushType.INSTALL_SNAPSHOT, "pre_log_index": end + 1000,
                                         "pre_log_term": 1, "next_pos": -FILE_BYTES},
        "a previous index before -1": {"type": PushType.COMPARE, "pre_log_index": -5, "pre_log_term": 1},
    }


@pytest.mark.parametrize("what", list(impossible_pushes(0)))
def test_a_push_that_cannot_be_true_is_answered_at_once(cluster: LocalCluster, what: str) -> None:
    for _attempt in range(3):  # again if an election (a busy machine) changes the term meanwhile
        leader = cluster.wait_leader()
        follower = next(m for m in cluster.members if m != leader)
        url = cluster.members[follower].client_url
        before = httpx.get(f"{url}/v1/cluster").json()
        fields = impossible_pushes(before["end_index"])[what]
        push = PushRequest(before["group"], leader, before["term"], commit_index=before["committed_index"], **fields)
        answers, status = replicate(cluster.members[follower].peer_port, [encode_push(push)], SECRET)
        after = httpx.get(f"{url}/v1/cluster").json()
        if (after["term"], after["leader"]) == (before["term"], leader):
            break
    assert status is grpc.StatusCode.OK and len(answers) == 1, "answered, and the stream ended as the leader ended it"
    assert decode_message(PushResponse, answers[0]).code is Code.UNEXPECTED_ARGUMENT
    # nothing changed: the follower keeps its log and follows its leader on
    assert after["begin_index"] == before["begin_index"] and after["end_index"] >= before["end_index"]
    index = httpx.post(f"{cluster.members[leader].client_url}/v1/entries", content=what.encode()).json()["index"]
    entry = httpx.get(f"{url}/v1/entries/{index}", params={"consistency": "linearizable"})
    assert entry.status_code == 200, entry.text
