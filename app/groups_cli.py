"""`raftlog groups ...`: consumer groups' offsets per queue, from the command line.

    raftlog groups list
    raftlog groups describe billing
    raftlog groups commit billing --topic orders --queue 3 --offset 12 [--expected 10]
    raftlog groups commit billing --topic orders --queue 0 --offset 5 --queue 1 --offset 7   (one entry)
    raftlog groups delete billing

An offset is the next one the group reads in its queue (0: nothing read yet; -1 removes it). With
--expected (one per --queue), the commit is a compare-and-set: all its queues move, or none.
"""

from __future__ import annotations

import argparse
from typing import Any

from raftlog.app.client_calls import ClientError, request


def add_commands(commands: Any) -> list[argparse.ArgumentParser]:
    """Add `groups` and its commands to the `raftlog` command's subparsers; the commands that call a
    member, for their --url, --token and --ca."""
    groups = commands.add_parser("groups", help="consumer groups: their offsets per queue, and lag",
                                 description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = groups.add_subparsers(dest="groups_command", required=True)
    listed = sub.add_parser("list", help="every group, and its lag")
    listed.set_defaults(run=_list)
    describe = sub.add_parser("describe", help="a group's offset and lag in each queue")
    describe.add_argument("group")
    describe.set_defaults(run=_describe)
    commit = sub.add_parser("commit", help="commit a group's offsets in queues of a topic (one entry)")
    commit.add_argument("group")
    commit.add_argument("--topic", required=True)
    commit.add_argument("--queue", type=int, action="append", required=True, help="a queue (repeat for more)")
    commit.add_argument("--offset", type=int, action="append", required=True,
                        help="the next offset the group reads in it, one per --queue (-1: remove it)")
    commit.add_argument("--expected", type=int, action="append",
                        help="a compare-and-set: the offset it must hold there now (-1: none), one per --queue")
    commit.set_defaults(run=_commit)
    delete = sub.add_parser("delete", help="remove a group and its offsets")
    delete.add_argument("group")
    delete.set_defaults(run=_delete)
    return [listed, describe, commit, delete]


def _url(args: argparse.Namespace, group: str | None = None) -> str:
    return f"{args.url}/v1/groups" + ("" if group is None else f"/{group}")


def _list(args: argparse.Namespace) -> int:
    print(f"{'group':<24}{'queues':>8}{'lag':>12}{'index':>10}  owner")
    for g in request(args, "GET", _url(args)).json()["groups"]:
        print(f"{g['name']:<24}{g['queue_count']:>8}{g['lag']:>12}{g['index']:>10}  {g['owner']}")
    return 0


def _describe(args: argparse.Namespace) -> int:
    group = request(args, "GET", _url(args, args.group)).json()
    print(f"{group['name']}: lag {group['lag']} in {group['queue_count']} queues (owner {group['owner']}, "
          f"last commit at entry {group['index']})")
    print(f"{'topic':<24}{'queue':>6}{'offset':>12}{'end':>12}{'lag':>12}")
    for topic in group["topics"]:
        for q in topic["queues"]:
            print(f"{topic['topic']:<24}{q['queue']:>6}{q['offset']:>12}{q['end']:>12}{q['lag']:>12}")
    return 0


def _commit(args: argparse.Namespace) -> int:
    expected = args.expected or []
    if len(args.offset) != len(args.queue) or len(expected) not in (0, len(args.queue)):
        raise ClientError("give one --offset (and, for a compare-and-set, one --expected) per --queue")
    queues: list[dict[str, Any]] = [{"queue": q, "offset": o} for q, o in zip(args.queue, args.offset, strict=True)]
    for queue, value in zip(queues, expected, strict=False):
        queue["expected"] = value
    committed = request(args, "POST", f"{_url(args, args.group)}/offsets",
                        json={"topic": args.topic, "queues": queues}).json()
    print(f"{'group':<24}{'topic':<24}{'queue':>6}{'offset':>12}{'index':>10}")
    for q in committed["queues"]:
        print(f"{committed['group']:<24}{committed['topic']:<24}{q['queue']:>6}{q['offset']:>12}"
              f"{committed['index']:>10}")
    return 0


def _delete(args: argparse.Namespace) -> int:
    request(args, "DELETE", _url(args, args.group))
    print(f"deleted {args.group}")
    return 0
