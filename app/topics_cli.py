"""`raftlog topics ...`: the topic catalog, and messages appended to a topic, from the command line.

    raftlog topics list
    raftlog topics describe orders
    raftlog topics create orders --queues 8 [--max-message-bytes N] [--description TEXT]   (admin)
    raftlog topics change orders [--queues 16] [--writable off] [--readable on] ...       (admin)
    raftlog topics delete orders                                                         (admin)
    raftlog topics append orders [BODY ...] [--key K] [--tag T] [--property NAME=VALUE]
                                 (stdin when no BODY; --lines: one message a line)

Every message of one `append` carries the same keys, tags and properties, and goes to one queue:
the --queue named, else its first key's, else the member's turn.
"""

from __future__ import annotations

import argparse
import base64
from typing import Any

from raftlog.app.client_calls import ClientError, dash, read_bodies, request

FLAGS = {"on": True, "off": False}


def add_commands(commands: Any) -> list[argparse.ArgumentParser]:
    """Add `topics` and its commands to the `raftlog` command's subparsers; the commands that call a
    member, for their --url, --token and --ca."""
    topics = commands.add_parser("topics", help="topics: create, list, change, delete; append messages",
                                 description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = topics.add_subparsers(dest="topics_command", required=True)
    listed = sub.add_parser("list", help="every topic")
    listed.set_defaults(run=_list)
    describe = sub.add_parser("describe", help="one topic")
    describe.add_argument("name")
    describe.set_defaults(run=_describe)
    create = sub.add_parser("create", help="create a topic (admin)")
    create.add_argument("name")
    create.add_argument("--queues", type=int, required=True, help="its queue count (it may grow, never shrink)")
    change = sub.add_parser("change", help="change a topic's fields (admin)")
    change.add_argument("name")
    change.add_argument("--queues", type=int, help="a larger queue count")
    for action, command in (("create", create), ("change", change)):
        command.add_argument("--max-message-bytes", type=int, help="its largest message body")
        command.add_argument("--description")
        command.add_argument("--readable", choices=FLAGS, help="whether its messages may be read")
        command.add_argument("--writable", choices=FLAGS, help="whether it takes messages (off: drained)")
        command.set_defaults(run=_change, action=action)
    delete = sub.add_parser("delete", help="delete a topic (admin): its messages leave with retention")
    delete.add_argument("name")
    delete.set_defaults(run=_delete)
    append = sub.add_parser("append", help="append messages to a topic, one batch")
    append.add_argument("name")
    append.add_argument("bodies", nargs="*", help="message bodies (default: stdin)")
    append.add_argument("--lines", action="store_true", help="stdin: one message a line")
    append.add_argument("--key", action="append", default=[], help="a key of every message (repeat for more)")
    append.add_argument("--tag", action="append", default=[], help="a tag of every message (repeat for more)")
    append.add_argument("--property", action="append", default=[], metavar="NAME=VALUE",
                        help="a property of every message (repeat for more)")
    append.add_argument("--queue", type=int, help="the queue (default: the key's, else the member's turn)")
    append.set_defaults(run=_append)
    return [listed, describe, create, change, delete, append]


def _url(args: argparse.Namespace, name: str | None = None) -> str:
    return f"{args.url}/v1/topics" + ("" if name is None else f"/{name}")


def _list(args: argparse.Namespace) -> int:
    _print_topics(request(args, "GET", _url(args)).json()["topics"])
    return 0


def _describe(args: argparse.Namespace) -> int:
    _print_topics([request(args, "GET", _url(args, args.name)).json()])
    return 0


def _change(args: argparse.Namespace) -> int:
    fields: dict[str, Any] = {name: getattr(args, name) for name in ("queues", "max_message_bytes", "description")
                              if getattr(args, name) is not None}
    fields.update({name: FLAGS[getattr(args, name)] for name in ("readable", "writable")
                   if getattr(args, name) is not None})
    if args.action == "create":
        topic = request(args, "POST", _url(args), json={"name": args.name, **fields}).json()
    else:
        topic = request(args, "PATCH", _url(args, args.name), json=fields).json()
    _print_topics([topic])
    return 0


def _delete(args: argparse.Namespace) -> int:
    request(args, "DELETE", _url(args, args.name))
    print(f"deleted {args.name}")
    return 0


def _append(args: argparse.Namespace) -> int:
    bodies = read_bodies(args.bodies, args.lines)
    properties = {}
    for item in args.property:
        name, sep, value = item.partition("=")
        if not sep:
            raise ClientError(f"--property {item!r}: expected NAME=VALUE")
        properties[name] = value
    messages = [{"body": base64.b64encode(body).decode(), "encoding": "base64", "keys": args.key, "tags": args.tag,
                 "properties": properties} for body in bodies]
    batch: dict[str, Any] = {"messages": messages, **({} if args.queue is None else {"queue": args.queue})}
    answers = request(args, "POST", f"{_url(args, args.name)}/messages", json=batch).json()["messages"]
    print(f"{'topic':<24}{'queue':>6}{'offset':>10}{'index':>10}{'pos':>12}")
    for m in answers:
        print(f"{m['topic']:<24}{m['queue']:>6}{m['queue_offset']:>10}{m['index']:>10}{m['pos']:>12}")
    return 0


def _print_topics(topics: list[dict[str, Any]]) -> None:
    print(f"{'name':<24}{'id':>8}{'queues':>8}  {'perm':<6}{'max message bytes':>18}  description")
    for t in topics:
        print(f"{t['name']:<24}{t['id']:>8}{t['queues']:>8}  {t['perm']:<6}{dash(t['max_message_bytes']):>18}  "
              f"{t['description']}")
