"""Refused calls are logged at most once a second per reason, with a count of the lines left out
(docs/operations.md, Security: "at most a line a second per reason, with a count of the rest"), so a flood
of bad calls cannot fill the disk.

Refusals are sent one at a time until a reason's second line appears: every refusal is then
either a line or counted in one, and the two lines are a second apart by their own timestamps.
"""

from __future__ import annotations

import re
from datetime import datetime

import httpx

from tests.processes import ClusterFactory, eventually, metric

TOKEN = "reader:" + "r" * 24
LINE = re.compile(r"^(\S+ \S+) WARNING raftlog\.auth: client port: refused GET '/v1/cluster' from \S+: "
                  r"(\w+)(?: \(and (\d+) more since the last line\))?$", re.MULTILINE)


def test_a_flood_of_refusals_logs_a_line_a_second_per_reason_with_a_count_of_the_rest(
        make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(1, tokens=TOKEN)
    cluster.wait_healthy("n1")
    member = cluster.members["n1"]
    start = len(member.log_path.read_text(errors="replace"))
    sent = {"missing": 0, "invalid": 0}

    def lines() -> list[tuple[str, str, int]]:
        text = member.log_path.read_text(errors="replace")[start:]
        return [(when, reason, int(more or 0)) for when, reason, more in LINE.findall(text)]

    def refuse_until_two_lines() -> bool:
        with httpx.Client(timeout=5) as client:
            for reason, headers in (("missing", {}), ("invalid", {"authorization": "Bearer " + "x" * 24})):
                assert client.get(f"{member.client_url}/v1/cluster", headers=headers).status_code == 401
                sent[reason] += 1
        logged = lines()
        return all(sum(1 for line in logged if line[1] == reason) >= 2 for reason in sent)

    eventually(refuse_until_two_lines, "a second line for each reason")
    for reason in sent:
        assert metric(member.client_url, "raftlog_auth_failures_total", port="client", reason=reason) == sent[reason]
        mine = [line for line in lines() if line[1] == reason]
        first, second = mine[0], mine[1]
        assert first[2] == 0  # the first refusal of a reason is logged at once, whatever the other reason did
        assert second[2] > 0, mine  # what came in between was counted, not logged
        assert sum(1 + more for _, _, more in mine) <= sent[reason], (mine, sent)  # none counted twice
        gap = (datetime.strptime(second[0], "%Y-%m-%d %H:%M:%S,%f")
               - datetime.strptime(first[0], "%Y-%m-%d %H:%M:%S,%f")).total_seconds()
        assert gap >= 0.99, mine  # the log's own clock: a line a second, at most
