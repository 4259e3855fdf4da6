"""The `raftlog` command line: run a node, run a local cluster, and small clients.

    raftlog serve [--config FILE] [--<setting> VALUE ...]   one node
    raftlog cluster [--nodes 3] [--data-dir data]           a local cluster of node processes
    raftlog append [BODY ...] [--batch]                     append (stdin when no BODY)
    raftlog get INDEX [--raw]                               read a committed entry
    raftlog status                                          cluster status
    raftlog members list|add|promote|remove ...             the group's members (changes: admin)
    raftlog consumers list|get|commit|delete ...            named consumers' committed positions
    raftlog topics list|describe|create|change|delete|append ...   topics and their messages
    raftlog groups list|describe|commit|delete ...          consumer groups' offsets per queue
    raftlog pipeline export|audit|stats ...                 Spark jobs (the `spark` extra)

Clients talk to --url (default $RAFTLOG_URL, else http://127.0.0.1:8001).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

from raftlog.app.client_calls import ClientError, dash, read_bodies, request
from raftlog.app.groups_cli import add_commands as add_group_commands
from raftlog.app.settings import REMOVED, Settings, SettingsError, load_settings
from raftlog.app.topics_cli import add_commands as add_topic_commands
from raftlog.pipeline.cli import add_commands as add_pipeline_commands

DEFAULT_URL = "http://127.0.0.1:8001"
CLUSTER_CLIENT_PORT = 8001
CLUSTER_PEER_PORT = 9001
CLUSTER_GRPC_PORT = 7001


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return int(args.run(args) or 0)
    except SettingsError as exc:
        print(f"raftlog: error: {exc}", file=sys.stderr)
        return 2
    except ClientError as exc:
        print(f"raftlog: {exc}", file=sys.stderr)
        return 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="raftlog", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"raftlog {version('raftlog')}")
    commands = parser.add_subparsers(dest="command")

    serve = commands.add_parser("serve", help="run one node")
    serve.add_argument("--config", type=Path, help="a TOML file of settings")
    for name, info in Settings.model_fields.items():
        if name != "toml_file":
            serve.add_argument(f"--{name.replace('_', '-')}", dest=f"setting_{name}", metavar="VALUE",
                               help=f"(default: {info.default})")
    serve.set_defaults(run=_serve)

    cluster = commands.add_parser("cluster", help="run a local cluster of node processes on loopback")
    cluster.add_argument("--nodes", type=int, default=3)
    cluster.add_argument("--data-dir", type=Path, default=Path("data"))
    cluster.add_argument("--client-port", type=int, default=CLUSTER_CLIENT_PORT, help="first client port")
    cluster.add_argument("--peer-port", type=int, default=CLUSTER_PEER_PORT, help="first peer port")
    cluster.add_argument("--grpc-port", type=int, default=CLUSTER_GRPC_PORT, help="first gRPC API port")
    cluster.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                         help="a setting for every node, e.g. --set flush_mode=async")
    cluster.set_defaults(run=_cluster)

    add_pipeline_commands(commands)

    members = commands.add_parser("members", help="list the group's members, or change them (admin)",
                                  description=MEMBERS_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    member_commands = members.add_subparsers(dest="members_command", required=True)
    clients = [member_commands.add_parser("list", help="members, roles and lag")]
    clients[0].set_defaults(run=_members_list)
    add = member_commands.add_parser("add", help="add a learner (or, with --voter, a voter)")
    add.add_argument("id")
    add.add_argument("--peer-address", required=True, metavar="HOST:PORT", help="its peer port")
    add.add_argument("--client-url", help="where its clients go, e.g. http://host:8004")
    add.add_argument("--grpc-address", metavar="HOST:PORT", help="its gRPC API")
    add.add_argument("--voter", action="store_true", help="a voter at once (default: a learner, promoted later)")
    add.set_defaults(run=_members_add)
    for name, help_ in (("promote", "make a caught-up learner a voter"),
                        ("remove", "remove a member (the leader hands leadership over first)")):
        change = member_commands.add_parser(name, help=help_)
        change.add_argument("id")
        change.set_defaults(run=_members_change, action=name)
        clients.append(change)
    clients.append(add)

    consumers = commands.add_parser("consumers", help="named consumers' committed positions",
                                    description=CONSUMERS_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    consumer_commands = consumers.add_subparsers(dest="consumers_command", required=True)
    for name, help_ in (("list", "every consumer, its position and lag"), ("get", "one consumer"),
                        ("commit", "commit a consumer's position"), ("delete", "remove a consumer")):
        command = consumer_commands.add_parser(name, help=help_)
        command.set_defaults(run=_consumers, action=name)
        clients.append(command)
        if name != "list":
            command.add_argument("name")
        if name == "commit":
            command.add_argument("position", type=int, help="the index of the last entry processed")
            command.add_argument("--metadata", default="", help="free text kept with the position")
            command.add_argument("--retention-floor", choices=("on", "off"), help="admin only: retention keeps what "
                                 "the consumer has not processed (on), or no longer (off); default: as it is")
        if name in ("commit", "delete"):
            command.add_argument("--expected", type=int, help="a compare-and-set: the position it must be at "
                                 "(-1 on commit: it must not exist yet)")

    clients += add_topic_commands(commands)
    clients += add_group_commands(commands)

    for name, run, help_ in (("append", _append, "append entries"), ("get", _get, "read an entry"),
                             ("status", _status, "show the cluster status")):
        client = commands.add_parser(name, help=help_)
        client.set_defaults(run=run)
        clients.append(client)
        if name == "append":
            client.add_argument("bodies", nargs="*", help="entry bodies (default: stdin)")
            client.add_argument("--batch", action="store_true", help="stdin: one entry per line, one batch")
        elif name == "get":
            client.add_argument("index", type=int)
            client.add_argument("--raw", action="store_true", help="write the body's bytes to stdout")
            client.add_argument("--consistency", choices=["linearizable", "local"], default="linearizable")
    for client in clients:
        client.add_argument("--url", default=os.environ.get("RAFTLOG_URL", DEFAULT_URL))
        client.add_argument("--token", default=os.environ.get("RAFTLOG_TOKEN"),
                            help="an API token, when the cluster has tokens (default: $RAFTLOG_TOKEN)")
        client.add_argument("--ca", type=Path, default=os.environ.get("RAFTLOG_CA"),
                            help="the CA file that signs the nodes' HTTPS certificates (default: $RAFTLOG_CA)")
    return parser


# -- serve and cluster -------------------------------------------------------------------


MEMBERS_HELP = """\
Membership changes go one at a time, each answered once committed:

  raftlog members list
  raftlog members add n4 --peer-address 127.0.0.1:9004 --client-url http://127.0.0.1:8004
  raftlog members promote n4      (refused while it lags more than max_promote_lag_entries)
  raftlog members remove n2

A new machine can also add itself:  raftlog serve --id n4 --peers n4-127.0.0.1:9004 ...
--join http://<any member's client URL>   (then promote it)."""


def _serve(args: argparse.Namespace) -> int:
    from raftlog.app.server import run

    values = {k.removeprefix("setting_"): v for k, v in vars(args).items()
              if k.startswith("setting_") and v is not None}
    run(load_settings(values, args.config))
    return 0


def _cluster(args: argparse.Namespace) -> int:
    from raftlog.app.launcher import LocalCluster

    settings = {}
    for item in args.set:
        name, sep, value = item.partition("=")
        if name in REMOVED:
            raise SettingsError(f"--set {name}: no setting any more: {REMOVED[name]}")
        if not sep or name not in Settings.model_fields:
            raise SettingsError(f"--set {item!r}: expected NAME=VALUE with a known setting name")
        settings[name] = value
    n = args.nodes
    cluster = LocalCluster(args.data_dir, n, client_ports=[args.client_port + i for i in range(n)],
                           peer_ports=[args.peer_port + i for i in range(n)],
                           grpc_ports=[args.grpc_port + i for i in range(n)], settings=settings)
    from raftlog.app.server import bind

    for member in cluster.members.values():  # fail with one line, not with n node logs
        bind("127.0.0.1", member.client_port, f"{member.id} client").close()
        bind("127.0.0.1", member.peer_port, f"{member.id} peer").close()
        bind("127.0.0.1", member.grpc_port, f"{member.id} gRPC").close()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _raise_stop)
    try:
        cluster.start()
        for member in cluster.members.values():
            cluster.wait_healthy(member.id)
        leader = cluster.wait_leader()
        print(f"raftlog: a local cluster of {n} nodes, data under {args.data_dir}/")
        for member in cluster.members.values():
            mark = "  (leader)" if member.id == leader else ""
            print(f"  {member.id}  client {member.client_url}   gRPC {member.grpc_address}   "
                  f"peer 127.0.0.1:{member.peer_port}   log {member.log_path}{mark}")
        print(f"admin page: {cluster.members['n1'].client_url}/ (on every node)")
        print(f"try:  curl -X POST --data-binary 'hello' {cluster.members['n1'].client_url}/v1/entries")
        print("Ctrl-C stops every node.", flush=True)
        while True:
            for member in cluster.members.values():
                if member.process is not None and not member.running:
                    print(f"raftlog: {member.id} exited with {member.process.returncode}; "
                          f"see {member.log_path}", file=sys.stderr, flush=True)
                    cluster.stop_member(member.id)
            time.sleep(0.2)
    except _Stop:
        return 0
    except (RuntimeError, TimeoutError) as exc:  # a node that died or never became ready
        print(f"raftlog: {exc}", file=sys.stderr)
        return 1
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)  # a second Ctrl-C must not cut the stopping short
        print("raftlog: stopping the nodes", flush=True)
        cluster.stop()


class _Stop(Exception):
    """Ctrl-C or SIGTERM to the launcher: stop every node."""


def _raise_stop(_sig: int, _frame: object) -> None:
    raise _Stop

CONSUMERS_HELP = """\
A consumer's position is an entry in the log, committed through the leader; readers resume
after it with ?consumer=NAME (REST) or `consumer` (gRPC Read):

  raftlog consumers list
  raftlog consumers commit billing 41 [--expected 40]     (41: the last entry processed)
  raftlog consumers commit billing 41 --retention-floor on  (an admin's: retention keeps what it has not read)
  raftlog consumers get billing
  raftlog consumers delete billing"""


# -- clients -----------------------------------------------------------------------------


def _append(args: argparse.Namespace) -> int:
    bodies = read_bodies(args.bodies, args.batch)
    if len(bodies) == 1:
        answer = request(args, "POST", f"{args.url}/v1/entries", content=bodies[0],
                          headers={"content-type": "application/octet-stream"}).json()
    else:
        from raftlog.api.bodies import BATCH_CONTENT_TYPE, encode_bodies

        answer = request(args, "POST", f"{args.url}/v1/entries/batch", content=encode_bodies(bodies),
                          headers={"content-type": BATCH_CONTENT_TYPE}).json()
    print(json.dumps(answer))
    return 0


def _get(args: argparse.Namespace) -> int:
    params = {"consistency": args.consistency}
    if args.raw:
        response = request(args, "GET", f"{args.url}/v1/entries/{args.index}", params=params,
                            headers={"accept": "application/octet-stream"})
        sys.stdout.buffer.write(response.content)
        return 0
    print(json.dumps(request(args, "GET", f"{args.url}/v1/entries/{args.index}", params=params).json()))
    return 0


def _status(args: argparse.Namespace) -> int:
    status = request(args, "GET", f"{args.url}/v1/cluster").json()
    print(f"group {status['group']}  term {status['term']}  leader {status['leader']}  "
          f"committed {status['committed_index']}  log {status['begin_index']}..{status['end_index']}  "
          f"cluster version {status.get('cluster_version', 0)}")
    _print_members(status)
    return 0


def _members_list(args: argparse.Namespace) -> int:
    status = request(args, "GET", f"{args.url}/v1/cluster").json()
    print(f"configuration of entry {status['configuration_index']}  leader {status['leader']}  "
          f"term {status['term']}  cluster version {status.get('cluster_version', 0)}")
    _print_members(status)
    return 0


def _print_members(status: dict[str, Any]) -> None:
    print(f"{'id':<6}{'kind':<9}{'role':<11}{'level':>6}{'match':>8}{'lag':>7}{'contact ms':>12}  "
          f"{'peer address':<22}client url")
    for m in status["members"]:
        print(f"{m['id']:<6}{'voter' if m['voter'] else 'learner':<9}{m['role'] or 'down':<11}"
              f"{dash(m.get('level')):>6}{dash(m['match_index']):>8}{dash(m['lag']):>7}"
              f"{dash(m['last_contact_ms']):>12}  {m['peer_url'].removeprefix('http://'):<22}{m['client_url'] or '-'}")


def _members_add(args: argparse.Namespace) -> int:
    new = {"id": args.id, "peer_address": args.peer_address, "client_url": args.client_url,
           "grpc_address": args.grpc_address, "learner": not args.voter}
    _print_configuration(request(args, "POST", f"{args.url}/v1/cluster/members", json=new).json())
    return 0


def _members_change(args: argparse.Namespace) -> int:
    if args.action == "promote":
        answer = request(args, "POST", f"{args.url}/v1/cluster/members/{args.id}/promote")
    else:
        answer = request(args, "DELETE", f"{args.url}/v1/cluster/members/{args.id}")
    _print_configuration(answer.json())
    return 0


def _consumers(args: argparse.Namespace) -> int:
    url = f"{args.url}/v1/consumers"
    if args.action == "list":
        answers = request(args, "GET", url).json()["consumers"]
    elif args.action == "get":
        answers = [request(args, "GET", f"{url}/{args.name}").json()]
    elif args.action == "commit":
        commit = {"position": args.position, "metadata": args.metadata, "expected": args.expected}
        if args.retention_floor is not None:
            commit["retention_floor"] = args.retention_floor == "on"
        answers = [request(args, "PUT", f"{url}/{args.name}", json=commit).json()]
    else:
        params = {} if args.expected is None else {"expected": args.expected}
        request(args, "DELETE", f"{url}/{args.name}", params=params)
        print(f"removed {args.name}")
        return 0
    print(f"{'name':<24}{'position':>10}{'lag':>10}{'lag bytes':>12}  {'owner':<16}{'floor':<7}metadata")
    for c in answers:
        floor = "yes" if c.get("retention_floor") else "no"
        print(f"{c['name']:<24}{c['position']:>10}{c['lag']:>10}{dash(c['lag_bytes']):>12}  "
              f"{c.get('owner') or '-':<16}{floor:<7}{c['metadata']}")
    return 0


def _print_configuration(configuration: dict[str, Any]) -> None:
    members = ", ".join(f"{m['id']} ({'voter' if m['voter'] else 'learner'})" for m in configuration["members"])
    print(f"committed: configuration of entry {configuration['index']}: {members}")


if __name__ == "__main__":
    raise SystemExit(main())
