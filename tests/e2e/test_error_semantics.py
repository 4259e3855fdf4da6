"""The errors a client decides its retries on, made to happen on a real 3-node cluster (issue 17,
"Error semantics users retry on"; docs/api.md, the errors table):

- the outcome is unknown, a retry may duplicate: 504 WAIT_QUORUM_ACK_TIMEOUT, 502 NETWORK_ERROR;
- nothing was done, retry later (`Retry-After`): 503 LEADER_PENDING_FULL, LEADER_TRANSFERRING, NOT_LEADER;
- transfers refused or failed with real members: 409;
- a linearizable read that cannot be served in time: 504 TIMEOUT, on a member that cannot catch up
  within read_wait_ms or on a leader no quorum confirms within max_wait_ack_ms;
- and the table itself: every code's status in api.errors is the one docs/api.md lists it under.

Members are stopped with SIGSTOP, or cut off one way by the fault suite's proxies on their peer
links (tests.faults.proxy). Each test leaves the cluster whole again, under whichever leader it elects.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from raftlog.api.errors import RETRY_LATER, STATUS, ApiError, too_large
from raftlog.app.launcher import SMALL_FILES
from raftlog.raft.messages import Code
from tests.faults.harness import FaultCluster
from tests.processes import eventually, metric

SETTINGS = {
    **SMALL_FILES,
    "max_wait_ack_ms": 600,  # an append without a quorum answers 504 after this long
    "max_heartbeat_leak": 30,  # a leader without a quorum steps down after 3 s: well after that 504
    "max_pending_requests": 2,
    "read_wait_ms": 300,
    "max_leadership_transfer_wait_index": 20,
    "leadership_transfer_wait_timeout_ms": 1500,
}
TIMEOUT_S = 30.0  # for a single HTTP call: generous, every wait in the cluster is shorter


class Cluster(FaultCluster):
    """What these tests do to the links into a member B, the links X->B: hold what reaches B (their
    `up` directions) or B's answers (`down`), one way only, as B still reaches the others through
    links of its own; and sever them, as B's death does."""

    def into(self, member_id: str) -> list[tuple[str, str]]:
        return [(other, member_id) for other in self.members if other != member_id]

    def hold(self, member_id: str, *, requests: bool = True, answers: bool = True) -> None:
        held = [name for name, on in (("up", requests), ("down", answers)) if on]
        self.network.hold([(link, name) for link in self.into(member_id) for name in held])

    def sever(self, member_id: str) -> None:
        """Reset the connections the others opened to the member; what they held is dropped."""
        self.network.reset(self.into(member_id))

    def resume_all(self) -> None:
        for member_id in sorted(self.paused):
            self.resume(member_id)

    def restore(self) -> str:
        """Undo whatever a test did: links healed, members resumed and running; returns the leader."""
        self.network.heal()
        self.resume_all()
        for member_id, member in self.members.items():
            if not member.running:
                self.stop_member(member_id)  # reaps it, closes its log
                self.start_member(member_id)
        return self.wait_leader()


@pytest.fixture(scope="module")
def module_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    cluster = Cluster(tmp_path_factory.mktemp("errors"), 3, SETTINGS)
    try:
        cluster.start()
        cluster.wait_leader()
        yield cluster
    finally:
        cluster.network.heal()
        cluster.stop()


@pytest.fixture
def cluster(module_cluster: Cluster) -> Iterator[Cluster]:
    """The shared cluster, whole and under one leader before and after each test."""
    module_cluster.restore()
    yield module_cluster
    module_cluster.restore()


# -- helpers ---------------------------------------------------------------------------------------


def url(cluster: Cluster, member_id: str) -> str:
    return cluster.members[member_id].client_url


def roles(cluster: Cluster) -> tuple[str, str, str]:
    """The leader and the two followers, as they are now."""
    leader = cluster.wait_leader()
    first, second = (m for m in cluster.members if m != leader)
    return leader, first, second


def append(base: str, body: bytes) -> httpx.Response:
    return httpx.post(f"{base}/v1/entries", content=body, timeout=TIMEOUT_S)


def end_index(base: str) -> int:
    """From /metrics: unlike /v1/cluster it asks no other member, so a stopped one does not slow it."""
    return int(metric(base, "raftlog_end_index"))


def error_of(response: httpx.Response) -> dict[str, Any]:
    return response.json()["error"]


def assert_unknown_outcome(response: httpx.Response, status: int, code: str) -> None:
    """An outcome the client cannot know: no advice to retry, the request may have taken effect."""
    assert response.status_code == status, response.text
    assert error_of(response)["code"] == code
    assert "retry-after" not in response.headers


def assert_nothing_done(response: httpx.Response, code: str) -> None:
    assert response.status_code == 503, response.text
    assert error_of(response)["code"] == code
    assert int(response.headers["retry-after"]) >= 1


def committed_bodies(base: str) -> list[bytes]:
    """Every committed entry's body, read from one member (consistency=local: after it caught up)."""
    bodies: list[bytes] = []
    start = 0
    while True:
        page = httpx.get(f"{base}/v1/entries", params={"start": start, "limit": 1000, "consistency": "local"},
                         timeout=TIMEOUT_S).json()
        bodies += [e["body"].encode() for e in page["entries"] if e["encoding"] == "utf-8"]
        if page["next"] > page["committed_index"]:
            return bodies
        start = page["next"]


def all_caught_up(cluster: Cluster, leader: str) -> bool:
    target = metric(url(cluster, leader), "raftlog_committed_index")
    return all(metric(m.client_url, "raftlog_committed_index") >= target for m in cluster.members.values())


class InBackground(threading.Thread):
    """A call made while the test does something else; `result()` waits for its answer."""

    def __init__(self, call: Callable[[], httpx.Response]) -> None:
        super().__init__(daemon=True)
        self.call = call
        self.answer: httpx.Response | BaseException | None = None
        self.start()

    def run(self) -> None:
        try:
            self.answer = self.call()
        except BaseException as exc:  # handed to the test by result()
            self.answer = exc

    def result(self) -> httpx.Response:
        self.join(TIMEOUT_S)
        assert not self.is_alive(), "the call did not return"
        if isinstance(self.answer, BaseException):
            raise self.answer
        assert self.answer is not None
        return self.answer


# -- appends: unknown outcomes and refusals -----------------------------------------------------------


def test_a_leader_without_a_quorum_times_out_then_is_full_then_has_no_leader(cluster: Cluster) -> None:
    leader, first, second = roles(cluster)
    base = url(cluster, leader)
    before = end_index(base)
    cluster.pause(first)
    cluster.pause(second)

    for n in range(2):  # max_pending_requests
        timed_out = append(base, f"unknown outcome {n}".encode())
        assert_unknown_outcome(timed_out, 504, "WAIT_QUORUM_ACK_TIMEOUT")
        assert end_index(base) == before + 1 + n  # written on the leader: it may still commit

    full = append(base, b"refused: pending full")
    assert_nothing_done(full, "LEADER_PENDING_FULL")
    assert error_of(full)["leader"] == leader
    assert end_index(base) == before + 2

    # max_heartbeat_leak beats without a quorum: the leader steps down, and no member leads
    eventually(lambda: metric(base, "raftlog_role", role="leader") == 0, "the leader to step down")
    no_leader = append(base, b"refused: no leader")
    assert_nothing_done(no_leader, "NOT_LEADER")
    assert error_of(no_leader)["leader"] is None
    assert end_index(base) == before + 2

    leader = cluster.restore()
    eventually(lambda: all_caught_up(cluster, leader), "every member to catch up")
    bodies = committed_bodies(url(cluster, leader))
    assert not [b for b in bodies if b.startswith(b"refused")]  # nothing refused was ever appended


def test_an_append_that_timed_out_may_still_commit(cluster: Cluster) -> None:
    """Why 504 means "unknown": the quorum answers late, and the entry the client was told timed out
    is in the log. Had the client sent it again, it would be there twice."""
    leader, first, second = roles(cluster)
    cluster.pause(first)
    cluster.pause(second)
    timed_out = append(url(cluster, leader), b"timed out, then committed")
    assert_unknown_outcome(timed_out, 504, "WAIT_QUORUM_ACK_TIMEOUT")
    cluster.resume_all()  # well within max_heartbeat_leak: the leader still leads, and pushes again
    eventually(lambda: b"timed out, then committed" in committed_bodies(url(cluster, leader)),
               "the timed-out append to commit")


def test_a_forwarded_append_whose_leader_dies_before_answering_is_an_unknown_outcome(
        cluster: Cluster) -> None:
    leader, first, _ = roles(cluster)
    before = int(metric(url(cluster, leader), "raftlog_committed_index"))
    cluster.hold(leader, requests=False, answers=True)  # the leader's answers to the others are held
    body = b"committed, yet the client heard 502"
    forwarded = InBackground(lambda: append(url(cluster, first), body))

    # the leader takes the forwarded append and commits it; its answer is held on the link
    eventually(lambda: metric(url(cluster, leader), "raftlog_committed_index") > before,
               "the forwarded append to commit")
    cluster.kill_member(leader)
    cluster.sever(leader)  # its connections die with it, answers still in flight included

    assert_unknown_outcome(forwarded.result(), 502, "NETWORK_ERROR")
    leader = cluster.restore()
    eventually(lambda: all_caught_up(cluster, leader), "every member to catch up")
    assert committed_bodies(url(cluster, leader)).count(body) == 1  # so a retry would have written it twice


def test_appends_during_a_transfer_are_refused_and_the_transfer_fails_when_its_target_never_catches_up(
        cluster: Cluster) -> None:
    leader, target, other = roles(cluster)
    cluster.pause(target)
    assert append(url(cluster, leader), b"the target misses this").status_code == 201
    transfer = InBackground(lambda: httpx.post(f"{url(cluster, leader)}/v1/cluster/leader",
                                               json={"target": target}, timeout=TIMEOUT_S))

    # until the transfer reaches the leader, appends go through; then they are refused, nothing written
    sent: list[bytes] = []

    def refused_append() -> httpx.Response | None:
        sent.append(f"during the transfer {len(sent)}".encode())
        response = append(url(cluster, leader), sent[-1])
        return response if response.status_code == 503 else None

    refused = eventually(refused_append, "an append refused during the transfer")
    assert_nothing_done(refused, "LEADER_TRANSFERRING")
    end = end_index(url(cluster, leader))
    sent.append(b"during the transfer, through a follower")
    assert_nothing_done(append(url(cluster, other), sent[-1]), "LEADER_TRANSFERRING")
    assert end_index(url(cluster, leader)) == end

    failed = transfer.result()  # the target, stopped, never catches up within leadership_transfer_wait_timeout_ms
    assert failed.status_code == 409, failed.text
    assert error_of(failed)["code"] == "TIMEOUT"
    assert metric(url(cluster, leader), "raftlog_role", role="leader") == 1
    assert append(url(cluster, leader), b"after the failed transfer").status_code == 201

    leader = cluster.restore()
    eventually(lambda: all_caught_up(cluster, leader), "every member to catch up")
    bodies = committed_bodies(url(cluster, leader))
    assert [b for b in sent if b in bodies] == sent[:-2]  # the two refused appends left nothing


def test_a_transfer_whose_target_does_not_answer_fails(cluster: Cluster) -> None:
    leader, target, _ = roles(cluster)
    cluster.hold(target)  # caught up, but the leader's transfer request never reaches it
    failed = httpx.post(f"{url(cluster, leader)}/v1/cluster/leader", json={"target": target}, timeout=TIMEOUT_S)
    assert failed.status_code == 409, failed.text
    assert error_of(failed)["code"] == "NETWORK_ERROR"
    assert metric(url(cluster, leader), "raftlog_role", role="leader") == 1
    assert append(url(cluster, leader), b"no transfer in progress").status_code == 201


def test_a_transfer_to_a_member_far_behind_is_refused(cluster: Cluster) -> None:
    leader, target, other = roles(cluster)
    cluster.pause(target)
    batch = [{"body": f"behind {i}"} for i in range(SETTINGS["max_leadership_transfer_wait_index"] + 1)]
    appended = httpx.post(f"{url(cluster, leader)}/v1/entries/batch", json={"entries": batch}, timeout=TIMEOUT_S)
    assert appended.status_code == 201, appended.text

    for via in (leader, other):  # on the leader, and through a follower
        refused = httpx.post(f"{url(cluster, via)}/v1/cluster/leader", json={"target": target}, timeout=TIMEOUT_S)
        assert refused.status_code == 409, refused.text
        assert error_of(refused)["code"] == "FALL_BEHIND_TOO_MUCH"
    assert metric(url(cluster, leader), "raftlog_role", role="leader") == 1
    assert append(url(cluster, leader), b"no transfer in progress").status_code == 201


def test_a_member_restarted_as_leader_gets_forwarded_calls_at_once(cluster: Cluster) -> None:
    """The others' idle connections to a member that restarted are dead, unseen: a forwarded call must
    not fail on one (it answered 502, an unknown outcome, for an append that was never sent)."""
    leader, first, second = roles(cluster)
    for follower in (first, second):  # each follower opens its connection to the leader
        assert append(url(cluster, follower), b"before the restart").status_code == 201
    cluster.kill_member(leader)
    successor = cluster.wait_leader(among=[first, second])
    cluster.start_member(leader)
    cluster.wait_leader()
    def transfer() -> bool:  # refused FALL_BEHIND_TOO_MUCH while it catches up (slowly, on a loaded machine)
        back = httpx.post(f"{url(cluster, successor)}/v1/cluster/leader", json={"target": leader}, timeout=TIMEOUT_S)
        assert back.status_code == 200 or error_of(back)["code"] == "FALL_BEHIND_TOO_MUCH", back.text
        return back.status_code == 200

    eventually(transfer, "leadership to go back to the restarted member")
    eventually(lambda: cluster.wait_leader() == leader, "the restarted member to lead")
    for follower in (first, second):
        forwarded = append(url(cluster, follower), b"after the restart")
        assert forwarded.status_code == 201, forwarded.text


# -- reads ---------------------------------------------------------------------------------------------


def test_a_linearizable_read_on_a_member_that_cannot_catch_up_times_out(cluster: Cluster) -> None:
    leader, behind, _ = roles(cluster)
    cluster.hold(behind)  # the leader's pushes and beats no longer reach it; it still reaches the leader
    appended = append(url(cluster, leader), b"past the held member")
    assert appended.status_code == 201, appended.text
    index = appended.json()["index"]

    read = httpx.get(f"{url(cluster, behind)}/v1/entries/{index}", timeout=TIMEOUT_S)
    assert read.status_code == 504, read.text  # the leader confirmed the index; this member waited read_wait_ms
    assert error_of(read)["code"] == "TIMEOUT"
    local = httpx.get(f"{url(cluster, behind)}/v1/entries/{index}", params={"consistency": "local"})
    assert local.status_code == 404 and error_of(local)["code"] == "INDEX_OUT_OF_RANGE"

    cluster.network.heal()
    caught_up = eventually(lambda: (r := httpx.get(f"{url(cluster, behind)}/v1/entries/{index}",
                                                   timeout=TIMEOUT_S)).status_code == 200 and r,
                           "the member to catch up and serve the entry")
    assert caught_up.json()["body"] == "past the held member"


def test_a_linearizable_read_on_a_leader_cut_from_its_quorum_times_out(cluster: Cluster) -> None:
    leader, first, second = roles(cluster)
    base = url(cluster, leader)
    cluster.pause(first)
    cluster.pause(second)
    unconfirmed = append(base, b"never confirmed")  # in the leader's log, not committed
    assert unconfirmed.status_code == 504
    read = httpx.get(f"{base}/v1/entries/{end_index(base)}", timeout=TIMEOUT_S)
    assert read.status_code == 504, read.text  # no quorum confirmed it still leads: no read, stale or not
    assert error_of(read)["code"] == "TIMEOUT"

    eventually(lambda: metric(base, "raftlog_role", role="leader") == 0, "the leader to step down")
    after = httpx.get(f"{base}/v1/entries/{end_index(base)}", timeout=TIMEOUT_S)
    assert_nothing_done(after, "NOT_LEADER")  # and once it knows it does not lead, there is no leader


# -- the table ------------------------------------------------------------------------------------------

ERRORS_DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"
# Answered with a status of their own where they arise, besides the code's status in api.errors.STATUS
OWN_STATUSES = {
    ("UNEXPECTED_ARGUMENT", 408): "a request that did not arrive in time (app.client_protocol)",
    ("UNEXPECTED_ARGUMENT", 413): "an entry, batch or request over its limit (api.errors.too_large)",
    ("UNEXPECTED_ARGUMENT", 415): "a batch of another content type (api.public)",
    ("UNEXPECTED_ARGUMENT", 431): "headers over max_header_bytes (app.client_protocol)",
    ("UNSUPPORTED", 404): "a path that is no route (api.public)",
    ("UNSUPPORTED", 405): "a method the path does not take, with Allow (api.public)",
    ("UNKNOWN_MEMBER", 404): "a membership change naming no member (api.errors.api_error)",
}
# What the API answers and the errors table of docs/api.md does not list yet: each fails as soon as the table does
NOT_IN_DOCS: dict[object, str] = {}


def errors_table() -> list[tuple[int, list[str], str]]:
    """docs/api.md's errors table: (status, codes, when) per row."""
    lines = ERRORS_DOC.read_text().splitlines()
    start = lines.index("| status | code | when |") + 2
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        status, codes, when = (cell.strip() for cell in line.strip().strip("|").split("|", 2))
        rows.append((int(status), re.findall(r"`([A-Z_]+)`", codes), when))
    return rows


def documented_statuses() -> dict[str, set[int]]:
    listed: dict[str, set[int]] = {}
    for status, codes, _ in errors_table():
        for code in codes:
            listed.setdefault(code, set()).add(status)
    return listed


def docs_gap(case: object) -> pytest.MarkDecorator | tuple[()]:
    if case not in NOT_IN_DOCS:
        return ()
    return pytest.mark.xfail(strict=True, reason=f"docs/api.md's errors table lacks it: {NOT_IN_DOCS[case]}")


CODES = sorted({code.name for code in STATUS} | set(documented_statuses()) - {c for c, _ in OWN_STATUSES})


@pytest.mark.parametrize("code", [pytest.param(code, marks=docs_gap(code)) for code in CODES])
def test_each_code_has_the_status_the_docs_list_it_under(code: str) -> None:
    listed = documented_statuses().get(code, set())
    assert code in Code.__members__, f"docs/api.md lists {code}, which is no code"
    status = STATUS[Code[code]]
    error = ApiError(Code[code], "message")
    assert error.status == status
    assert listed - {s for c, s in OWN_STATUSES if c == code} == {status}, (
        f"docs/api.md lists {code} under {sorted(listed)}; api.errors.STATUS answers {status}")
    assert ("Retry-After" in error.headers()) == (status == 503)


@pytest.mark.parametrize("case", [pytest.param(case, marks=docs_gap(case), id=f"{case[0]}-{case[1]}")
                                  for case in OWN_STATUSES])
def test_each_status_of_its_own_is_in_the_docs(case: tuple[str, int]) -> None:
    code, status = case
    assert status in documented_statuses().get(code, set())
    unmapped = {c: listed for c, listed in documented_statuses().items() if c in Code.__members__
                and Code[c] not in STATUS}  # codes with statuses of their own only: under those alone
    assert all(listed <= {s for c, s in OWN_STATUSES if c == code} for code, listed in unmapped.items())


def test_retry_after_goes_with_the_statuses_the_docs_say() -> None:
    with_retry = {status for status, _, when in errors_table() if "Retry-After" in when}
    assert {STATUS[code] for code in RETRY_LATER} == with_retry == {503}
    assert too_large("over").status == 413
