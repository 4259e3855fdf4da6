"""Real processes failing: a leader killed with SIGKILL under load, a follower restarted from
its files, leadership transfer, and a member left without a quorum."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import httpx

from raftlog.app.launcher import LocalCluster
from raftlog.storage.codec import HEADER, HEADER_SIZE
from tests.processes import ClusterFactory, eventually


class Writer(threading.Thread):
    """Appends numbered entries through every member in turn, remembering every acknowledgement
    (a list: two acknowledgements at one index must not hide each other)."""

    def __init__(self, cluster: LocalCluster) -> None:
        super().__init__(daemon=True)
        self.urls = [m.client_url for m in cluster.members.values()]
        self.acked: list[tuple[int, bytes]] = []  # (index, body), in the order answered
        self.errors: dict[str, int] = {}
        self.stopping = threading.Event()
        self.progress = threading.Condition()

    def run(self) -> None:
        with httpx.Client(timeout=5.0) as client:
            i = 0
            while not self.stopping.is_set():
                body = f"w{i}".encode()
                try:
                    response = client.post(f"{self.urls[i % len(self.urls)]}/v1/entries", content=body)
                    if response.status_code == 201:
                        with self.progress:
                            self.acked.append((response.json()["index"], body))
                            self.progress.notify_all()
                    else:
                        code = response.json()["error"]["code"]
                        self.errors[code] = self.errors.get(code, 0) + 1
                except httpx.HTTPError as exc:  # a member that was just killed
                    self.errors[type(exc).__name__] = self.errors.get(type(exc).__name__, 0) + 1
                i += 1

    def wait_for(self, count: int, timeout_s: float = 30.0) -> None:
        with self.progress:
            assert self.progress.wait_for(lambda: len(self.acked) >= count, timeout_s), \
                f"only {len(self.acked)} of {count} appends acknowledged; errors {self.errors}"


def status(url: str) -> dict[str, Any]:
    return httpx.get(f"{url}/v1/cluster", timeout=5.0).json()


def append_batch(cluster: LocalCluster, bodies: list[str], via: str) -> int:
    """Append a batch through `via` (a follower forwards it to whoever leads now), again while the answer
    is 503 (nothing was appended: an election on a busy machine); its last index."""
    def appended() -> int | None:
        answer = httpx.post(f"{cluster.members[via].client_url}/v1/entries/batch",
                            json={"entries": [{"body": b} for b in bodies]}, timeout=10.0)
        assert answer.status_code in (201, 503), answer.text
        return answer.json()["last_index"] if answer.status_code == 201 else None

    return eventually(appended, f"a batch appended through {via}")


def read_all(url: str, start: int, end: int) -> dict[int, bytes]:
    found: dict[int, bytes] = {}
    with httpx.stream("GET", f"{url}/v1/entries", params={"start": start, "limit": end - start + 1, "control": True},
                      headers={"accept": "application/x-ndjson"}, timeout=10.0) as stream:
        for line in stream.iter_lines():
            if line:
                entry = httpx.Response(200, content=line).json()
                found[entry["index"]] = entry["body"].encode()
    return found


def test_killing_the_leader_under_load_loses_no_acknowledged_append(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(3)
    old_leader = cluster.wait_leader()
    writer = Writer(cluster)
    writer.start()
    try:
        writer.wait_for(100)
        cluster.kill_member(old_leader)
        acked_at_kill = len(writer.acked)
        writer.wait_for(acked_at_kill + 100)  # a new leader took over
    finally:
        writer.stopping.set()
        writer.join()
    new_leader = cluster.wait_leader()
    assert new_leader != old_leader

    indices = [index for index, _ in writer.acked]
    twice = sorted(index for index, count in Counter(indices).items() if count > 1)
    assert not twice, f"two acknowledgements at indices {twice[:10]}"
    cluster.start_member(old_leader)
    cluster.wait_leader()
    last = max(indices)
    for member in cluster.members.values():
        eventually(lambda m=member: status(m.client_url)["committed_index"] >= last,
                   f"{member.id} to commit index {last}")
        found = read_all(member.client_url, min(indices), last)
        lost = sorted(index for index, body in writer.acked if found.get(index) != body)
        assert not lost, f"{member.id} lost acknowledged appends: {lost[:10]}"


def test_a_follower_restarted_from_its_files_catches_up(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(3)
    leader = cluster.wait_leader()
    follower, other = (m for m in cluster.members if m != leader)
    append_batch(cluster, [f"before{i}" for i in range(50)], via=other)
    cluster.kill_member(follower)
    last = -1
    for batch in range(5):  # two of three members are a quorum
        last = append_batch(cluster, [f"while-down-{batch}-{i}" for i in range(100)], via=other)

    cluster.start_member(follower)
    url = cluster.members[follower].client_url
    cluster.wait_healthy(follower)
    eventually(lambda: status(url)["committed_index"] >= last, f"{follower} to catch up to {last}")
    theirs = read_all(url, 0, last)
    ours = read_all(cluster.members[other].client_url, 0, last)
    assert theirs == ours and len(theirs) == last + 1


def test_leadership_transfer_through_any_member(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(3)
    leader = cluster.wait_leader()
    target, other = (m for m in cluster.members if m != leader)
    asked = cluster.members[other].client_url  # a follower forwards the request to the leader
    httpx.post(f"{asked}/v1/entries", content=b"before the transfer")
    response = httpx.post(f"{asked}/v1/cluster/leader", json={"target": target}, timeout=10.0)
    assert response.status_code == 200, response.text
    assert response.json()["leader"] == target
    target_url = cluster.members[target].client_url
    became = 'raftlog_role_changes_total{role="leader"}'
    assert any(line.startswith(became) and float(line.split()[-1]) >= 1
               for line in httpx.get(f"{target_url}/metrics").text.splitlines()), "the target never led"

    def appended_after() -> httpx.Response | None:
        """To whoever leads now. A member that has not yet heard from the new leader answers 503 with
        Retry-After, and nothing was appended: a client asks again."""
        answer = httpx.post(f"{asked}/v1/entries", content=b"after the transfer")
        assert answer.status_code in (201, 503), answer.text
        return answer if answer.status_code == 201 else None

    after = eventually(appended_after, "an append after the transfer")
    assert after.json()["leader"] == cluster.wait_leader()

    unknown = httpx.post(f"{asked}/v1/cluster/leader", json={"target": "n9"})
    assert unknown.status_code == 400 and unknown.json()["error"]["code"] == "UNKNOWN_MEMBER"


def test_a_member_without_a_quorum_answers_503_not_leader(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(3)
    leader = cluster.wait_leader()
    survivor, other = (m for m in cluster.members if m != leader)
    url = cluster.members[survivor].client_url
    committed = httpx.post(f"{url}/v1/entries", content=b"committed").json()["index"]
    eventually(lambda: status(url)["committed_index"] >= committed, "the survivor to learn the commit")
    cluster.kill_member(leader)
    cluster.kill_member(other)

    def refused() -> httpx.Response | None:
        response = httpx.post(f"{url}/v1/entries", content=b"no quorum", timeout=10.0)
        return response if response.status_code == 503 else None

    response = eventually(refused, "the survivor to notice it has no leader")
    assert response.json()["error"]["code"] == "NOT_LEADER" and response.headers["retry-after"]
    assert httpx.get(f"{url}/readyz").status_code == 503
    assert httpx.get(f"{url}/v1/entries/{committed}").status_code == 200  # committed here: answered at once
    future = httpx.get(f"{url}/v1/entries/{committed + 1}")
    assert future.status_code == 503 and future.json()["error"]["code"] == "NOT_LEADER"
    assert httpx.get(f"{url}/v1/entries/{committed + 1}", params={"consistency": "local"}).status_code == 404

    cluster.start_member(other)
    cluster.wait_leader()

    def appended() -> bool:
        """As a client does: a NETWORK_ERROR (the member's connection to a leader just back may still
        be waiting to reconnect, and the append was not sent) is asked again."""
        answer = httpx.post(f"{url}/v1/entries", content=b"quorum again", timeout=10.0)
        assert answer.status_code in (201, 502), answer.text
        return answer.status_code == 201

    eventually(appended, "an append with a quorum again")


def test_a_damaged_committed_entry_is_refused_then_repaired_from_a_peer(make_cluster: ClusterFactory) -> None:
    """A bit flipped in a data file that recovery does not rescan: the member never serves the damaged
    entry, and the read that finds it gets it rewritten from a peer's copy (over the peer port)."""
    cluster = make_cluster(3, data_file_size=64 << 10, max_entry_bytes=16 << 10, scrub_interval_ms=0)
    leader = cluster.wait_leader()
    victim, other = (m for m in cluster.members if m != leader)
    for batch in range(6):  # 300 entries of 1 KiB: five data files
        last = append_batch(cluster, [f"{batch}-{i}-" + "x" * 1000 for i in range(50)], via=other)
    url = cluster.members[victim].client_url
    eventually(lambda: status(url)["committed_index"] >= last, f"{victim} to commit {last}")
    cluster.stop_member(victim)
    first_file = sorted((cluster.members[victim].data_dir / "data").iterdir())[0]
    data = bytearray(first_file.read_bytes())
    offset = 0  # to entry 6, header by header: NOOPs of new leaders may stand anywhere before it
    while HEADER.unpack_from(data, offset)[2] != 6:
        offset += HEADER.unpack_from(data, offset)[1]
    data[offset + HEADER_SIZE + 100] ^= 0x20  # a bit of its body
    first_file.write_bytes(bytes(data))
    cluster.start_member(victim)
    cluster.wait_leader()
    other_url = cluster.members[other].client_url  # not damaged there: reads are checked against it

    good = httpx.get(f"{other_url}/v1/entries/6").json()["body"]
    assert good.startswith("0-"), good  # a client's entry, not a NOOP
    refused = httpx.get(f"{url}/v1/entries/6", params={"consistency": "local"})
    assert refused.status_code == 500 and refused.json()["error"]["code"] == "DISK_ERROR"
    repaired = eventually(lambda: httpx.get(f"{url}/v1/entries/6", params={"consistency": "local"}).status_code == 200,
                          "the damaged entry to be repaired")
    assert repaired and httpx.get(f"{url}/v1/entries/6", params={"consistency": "local"}).json()["body"] == good
    assert "raftlog_repaired_entries_total 1.0" in httpx.get(f"{url}/metrics").text
    assert read_all(url, 0, last) == read_all(other_url, 0, last)
