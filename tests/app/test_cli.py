"""The command line as an operator meets it: bad settings fail with one line, the small
clients work against a cluster, and `raftlog cluster` leaves no process behind."""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from raftlog.api.auth import Caller, Role, TokenError, Tokens
from raftlog.app.cli import main
from raftlog.app.launcher import SMALL_FILES, free_ports
from raftlog.app.settings import SettingsError, load_settings
from raftlog.raft.cluster_version import LEVEL
from raftlog.storage.message import key_queue
from tests.pki import Pki
from tests.processes import ClusterFactory, free_port_run


def raftlog(*args: str, stdin: bytes = b"", env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "raftlog.app.cli", *args], input=stdin.decode(), capture_output=True,
                          text=True, timeout=60, env={**os.environ, **(env or {})})


def serve_args(tmp_path: Path, **overrides: str) -> list[str]:
    client, peer, grpc_port = free_ports(3)
    values = {"id": "n1", "peers": f"n1-127.0.0.1:{peer}", "data-dir": str(tmp_path / "n1"),
              "client-port": str(client), "grpc-port": str(grpc_port), **overrides}
    return ["serve", *[part for name, value in values.items() for part in (f"--{name}", value)]]


@pytest.mark.parametrize(("overrides", "message"), [
    ({"id": "n9"}, "self_id 'n9' is not among the peers"),
    ({"peers": "n1-127.0.0.1:1;n1-127.0.0.1:2"}, "duplicate member ids"),
    ({"peers": "n1:127.0.0.1"}, "is not of the form id-host:port"),
    ({"flush-mode": "sometimes"}, "setting flush_mode"),
    ({"heartbeat-interval-ms": "0"}, "heartbeat_interval_ms must be positive"),
    ({"client-port": "many"}, "setting client_port"),
    ({"peers": "n1-127.0.0.1:70000"}, "'70000' in '127.0.0.1:70000' is not a TCP port number"),
    ({"max-entry-bytes": str(2 << 30)}, "does not fit in a data file"),
    ({"peers": "n1-127.0.0.1:1;n2-10.9.8.7:9001;n3-db3.example:9001"},
     "peers beyond loopback (n2-10.9.8.7:9001, n3-db3.example:9001) need cluster_secret"),
    ({"peers": "n1-127.0.0.1:1;n2-10.9.8.7:9001", "cluster-secret": "s" * 16}, "needs client tokens"),
    ({"client-host": "0.0.0.0"}, "listening beyond loopback (client port on 0.0.0.0, gRPC port on 0.0.0.0) needs "
                                 "client tokens"),
    ({"grpc-host": "0.0.0.0"}, "listening beyond loopback (gRPC port on 0.0.0.0) needs client tokens"),
    ({"cluster-secret": "short"}, "the cluster secret must be 16 or more printable ASCII characters"),
    ({"cluster-secret": "s\u00e9cret-0123456789abcdef"}, "the cluster secret must be 16 or more printable ASCII"),
    ({"cluster-secret-file": "/nonexistent/secret"}, "cluster_secret_file: cannot read /nonexistent/secret"),
    ({"tokens": "reader:short"}, "tokens, entry 1: a token is 16 or more printable ASCII characters"),
    ({"tokens": "reader:" + "r" * 16 + ",king:" + "k" * 16}, "tokens, entry 2: expected role:name:token"),
    ({"tokens": "reader:" + "r" * 16 + ",writer:" + "r" * 16}, "entry 2: this token is listed before with another"),
    ({"tokens": "consumer:" + "c" * 16}, "tokens, entry 1: a consumer token's name is the consumer it moves"),
    ({"tokens": "consumer:ops@example:" + "c" * 16}, "tokens, entry 1: a consumer token's name is the consumer"),
    ({"client-tls-cert": "/nonexistent/cert.pem"}, "client_tls_cert and client_tls_key go together"),
    ({"peer-tls-cert": "/x.pem", "peer-tls-key": "/x.key"}, "needs peer_tls_cert, peer_tls_key and peer_tls_ca"),
    ({"client-tls-cert": "/x.pem", "client-tls-key": "/x.key"}, "client_tls_cert: /x.pem is not a file"),
    ({"max-inflight-body-bytes": "10"}, "max_inflight_body_bytes 10 is below max_request_bytes"),
    ({"peer-window-bytes": str(1 << 20)}, "peer_window_bytes 1048576 is below push_inflight_bytes_max"),
    ({"peer-window-bytes": "1000"}, "peer_window_bytes 1000 must be 65535 to 2 GiB"),
    ({"peer-answers-ahead-max": "0"}, "peer_answers_ahead_max 0 must be at least 1"),
    ({"append-stream-window-batches": "0"}, "append_stream_window_batches 0 must be at least 1"),
    ({"control-queue-max": "0"}, "control_queue_max must be positive"),
    ({"waiting-pushes-max": "-1"}, "waiting_pushes_max must be positive"),
    ({"max-take-leadership-vote-interval-ms": "10"}, "max_take_leadership_vote_interval_ms must be at least"),
])
def test_bad_settings_fail_at_start_with_one_line(tmp_path: Path, overrides: dict[str, str], message: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """The command's main in this process; the TOML test below runs it as a process of its own."""
    assert main(serve_args(tmp_path, **overrides)) == 2
    stderr = capsys.readouterr().err
    assert message in stderr and stderr.count("\n") == 1, stderr


def test_beyond_loopback_a_secret_and_tokens_or_insecure_are_needed(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    remote = {"peers": "n1-127.0.0.1:9001;n2-10.9.8.7:9001", "client_host": "0.0.0.0"}
    tokens_file = tmp_path / "tokens"
    tokens_file.write_text("# role:token\nwriter:" + "w" * 20 + "\n\n  admin:" + "a" * 20 + "  \n")
    secret_file = tmp_path / "secret"
    secret_file.write_text("s" * 20 + "\n")
    secured = load_settings({**remote, "cluster_secret_file": str(secret_file), "tokens_file": str(tokens_file)})
    tokens = secured.client_tokens()
    assert tokens is not None and tokens.role_of(b"w" * 20) is Role.WRITER and tokens.role_of(b"a" * 20) is Role.ADMIN
    assert tokens.role_of(b"s" * 20) is None and secured.secret() == b"s" * 20
    assert "s" * 20 not in repr(secured) and "s" * 20 not in str(secured.model_dump())  # never printed
    assert load_settings({**remote, "insecure": True}).secret() is None
    warned = secured.cleartext_warnings()
    assert len(warned) == 2 and "cluster secret goes to peers beyond loopback in cleartext" in warned[0]
    assert "clients send their tokens to 0.0.0.0 in cleartext" in warned[1]
    pki = Pki(tmp_path / "pki", "settings")
    certificates = {f"{port}_tls_{part}": str(path) for port in ("client", "peer")
                    for part, path in (("cert", pki.cert), ("key", pki.key))}
    encrypted = load_settings({**remote, "cluster_secret_file": str(secret_file), "tokens_file": str(tokens_file),
                               **certificates, "peer_tls_ca": str(pki.ca_file)})
    assert encrypted.cleartext_warnings() == [] and encrypted.client_url.startswith("https://")
    bad_file = tmp_path / "bad-tokens"
    bad_file.write_text("# ops\nreader:" + "r" * 20 + "\nwriter:" + "w" * 10 + " # too short\n")
    with pytest.raises(SettingsError, match=f"{bad_file}, line 3: a token is 16 or more"):
        load_settings({**remote, "insecure": True, "tokens_file": str(bad_file)}).client_tokens()
    monkeypatch.setenv("RAFTLOG_TOKENS", "reader:" + "r" * 16)
    assert load_settings().client_tokens().role_of(b"r" * 16) is Role.READER  # type: ignore[union-attr]


@pytest.mark.parametrize(("flag", "what"), [("client-port", "client"), ("grpc-port", "gRPC")])
def test_a_port_in_use_fails_at_start(tmp_path: Path, flag: str, what: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = raftlog(*serve_args(tmp_path, **{flag: str(port)}))
    assert result.returncode == 2 and f"cannot listen on 127.0.0.1:{port} for the {what} port" in result.stderr
    assert result.stderr.count("\n") == 1, result.stderr


def test_an_unusable_data_dir_fails_at_start(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("not a directory")
    result = raftlog(*serve_args(tmp_path, **{"data-dir": str(tmp_path / "a-file" / "n1")}))
    assert result.returncode == 2 and "cannot open the data dir" in result.stderr
    assert result.stderr.count("\n") == 1, result.stderr


def test_the_removed_retention_floor_setting_says_what_took_its_place(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """consumer_retention_floor, member-wide, became a flag of each named consumer that an admin sets:
    an old settings file stops the start with one line naming that, not pydantic's "extra inputs"."""
    toml = tmp_path / "node.toml"
    toml.write_text("consumer_retention_floor = true\n")
    with pytest.raises(SettingsError, match=r"^setting consumer_retention_floor is no setting any more: "
                                            r"retention's floor is now a flag of each named consumer"):
        load_settings(toml_file=toml)
    monkeypatch.setenv("RAFTLOG_CONSUMER_RETENTION_FLOOR", "true")  # else ignored, as unknown names are
    with pytest.raises(SettingsError, match="RAFTLOG_CONSUMER_RETENTION_FLOOR: consumer_retention_floor is no"):
        load_settings()


def test_settings_come_from_a_toml_file_and_the_environment(tmp_path: Path) -> None:
    toml = tmp_path / "node.toml"
    toml.write_text('id = "n9"\nflush_mode = "async"\n')
    result = raftlog(*serve_args(tmp_path)[:1], "--config", str(toml), env={"RAFTLOG_PEERS": "n1-127.0.0.1:1"})
    assert result.returncode == 2 and "self_id 'n9' is not among the peers ['n1']" in result.stderr


def test_append_get_and_status_clients(make_cluster: ClusterFactory) -> None:
    cluster = make_cluster(3)
    cluster.wait_leader()
    url = cluster.members["n2"].client_url
    one = raftlog("append", "--url", url, "hello from the terminal")
    assert one.returncode == 0 and '"index"' in one.stdout
    batch = raftlog("append", "--url", url, "--batch", stdin=b"line one\nline two\n")
    assert batch.returncode == 0 and '"last_index"' in batch.stdout
    index = int(one.stdout.split('"index": ')[1].split(",")[0])
    got = raftlog("get", "--url", url, str(index))
    assert got.returncode == 0 and "hello from the terminal" in got.stdout
    raw = raftlog("get", "--url", url, "--raw", str(index))
    assert raw.stdout == "hello from the terminal"
    status = raftlog("status", "--url", url)
    assert status.returncode == 0 and "leader" in status.stdout and f"cluster version {LEVEL}" in status.stdout
    assert all(member in status.stdout for member in cluster.members)
    assert raftlog("consumers", "commit", "--url", url, "billing", str(index)).returncode == 0
    listed = raftlog("consumers", "list", "--url", url).stdout.splitlines()
    assert listed[0].split()[:6] == ["name", "position", "lag", "lag", "bytes", "owner"]
    assert listed[1].split()[:2] == ["billing", str(index)] and listed[1].split()[4:6] == ["local", "no"]
    missing = raftlog("get", "--url", url, "999999")
    assert missing.returncode == 1 and "404 INDEX_OUT_OF_RANGE" in missing.stderr


def test_topics_clients(make_cluster: ClusterFactory) -> None:
    """The catalog and appends by key through a follower; each answer a table, each refusal a line."""
    cluster = make_cluster(3)
    leader = cluster.wait_leader()
    url = cluster.members[next(m for m in cluster.members if m != leader)].client_url
    created = raftlog("topics", "create", "--url", url, "orders", "--queues", "4", "--description", "by customer")
    assert created.returncode == 0, created.stderr
    header, row = created.stdout.splitlines()
    assert header.split()[:4] == ["name", "id", "queues", "perm"]
    topic_id = row.split()[1]
    assert row.split()[:4] == ["orders", topic_id, "4", "rw"] and row.endswith("by customer")

    queue = str(key_queue("customer-42", 4))
    appended = raftlog("topics", "append", "orders", "one", "two", "--url", url, "--key", "customer-42", "--tag", "new",
                       "--property", "region=eu")
    assert appended.returncode == 0, appended.stderr
    rows = [line.split() for line in appended.stdout.splitlines()[1:]]
    assert [r[:3] for r in rows] == [["orders", queue, "0"], ["orders", queue, "1"]]
    lines = raftlog("topics", "append", "--url", url, "orders", "--key", "customer-42", "--lines",
                    stdin=b"three\nfour\n")
    assert [line.split()[2] for line in lines.stdout.splitlines()[1:]] == ["2", "3"]
    bad = raftlog("topics", "append", "orders", "five", "--url", url, "--property", "region")
    assert bad.returncode == 1 and "--property 'region': expected NAME=VALUE" in bad.stderr

    changed = raftlog("topics", "change", "--url", url, "orders", "--writable", "off", "--queues", "8")
    assert changed.stdout.splitlines()[1].split()[:4] == ["orders", topic_id, "8", "r-"]
    refused = raftlog("topics", "append", "orders", "five", "--url", url)
    assert refused.returncode == 1 and "403 TOPIC_NOT_WRITABLE" in refused.stderr
    listed = raftlog("topics", "list", "--url", url)
    assert [line.split()[0] for line in listed.stdout.splitlines()[1:]] == ["orders"]
    assert raftlog("topics", "delete", "--url", url, "orders").stdout == "deleted orders\n"
    missing = raftlog("topics", "describe", "--url", url, "orders")
    assert missing.returncode == 1 and "404 TOPIC_NOT_FOUND" in missing.stderr


def test_clients_with_a_token_over_https(make_cluster: ClusterFactory, tmp_path: Path) -> None:
    pki = Pki(tmp_path / "pki", "cli")
    token = "writer-token-for-the-cli"
    cluster = make_cluster(1, tokens=f"writer:{token}", client_tls_cert=pki.cert, client_tls_key=pki.key)
    cluster.verify = pki.client_context()
    cluster.wait_leader()
    url = cluster.members["n1"].client_url
    assert url.startswith("https://")
    refused = raftlog("append", "--url", url, "--ca", str(pki.ca_file), "no token")
    assert refused.returncode == 1 and "401 UNAUTHENTICATED: no bearer token" in refused.stderr
    untrusted = raftlog("status", "--url", url, "--token", token)
    assert untrusted.returncode == 1 and "CERTIFICATE_VERIFY_FAILED" in untrusted.stderr
    one = raftlog("append", "--url", url, "--ca", str(pki.ca_file), "--token", token, "with a token")
    assert one.returncode == 0 and '"index"' in one.stdout
    index = one.stdout.split('"index": ')[1].split(",")[0]
    got = raftlog("get", "--url", url, index, env={"RAFTLOG_TOKEN": token, "RAFTLOG_CA": str(pki.ca_file)})
    assert got.returncode == 0 and "with a token" in got.stdout


def test_cluster_command_starts_nodes_and_ctrl_c_stops_them_all(tmp_path: Path) -> None:
    client = free_port_run(9)  # three runs of three: client, peer and gRPC ports
    peer, grpc_port = client + 3, client + 6
    settings = [arg for name, value in SMALL_FILES.items() for arg in ("--set", f"{name}={value}")]
    launcher = subprocess.Popen(
        [sys.executable, "-m", "raftlog.app.cli", "cluster", "--nodes", "3", "--data-dir", str(tmp_path / "data"),
         "--client-port", str(client), "--peer-port", str(peer), "--grpc-port", str(grpc_port), *settings],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert launcher.stdout is not None
        lines = []
        for line in launcher.stdout:
            lines.append(line)
            if "Ctrl-C" in line:
                break
        output = "".join(lines)
        assert "(leader)" in output and f"http://127.0.0.1:{client + 2}" in output, output
        assert f"gRPC 127.0.0.1:{grpc_port + 2}" in output, output
        nodes = node_pids(tmp_path)
        assert len(nodes) == 3
        launcher.send_signal(signal.SIGINT)
        assert launcher.wait(30) == 0
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
    assert node_pids(tmp_path) == []


def node_pids(tmp_path: Path) -> list[int]:
    """Node processes whose command line names this test's data directory."""
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if str(tmp_path) in cmdline and "serve" in cmdline:
                pids.append(int(proc.name))
    return pids


def test_tokens_are_named_and_the_old_form_is_named_by_its_digest() -> None:
    """role:name:token names the caller (a producer session's owner); role:token still works, named
    by its digest's first hex digits; two tokens of one name (a rotation) are one caller."""
    tokens = Tokens.parse("writer:billing:" + "b" * 20 + "\nwriter:billing:" + "c" * 20 + "\nreader:" + "r" * 20
                          + "\nadmin:ops@example:" + "x:" * 10, "tokens", lines=True)
    assert tokens.caller_of(b"b" * 20) == Caller(Role.WRITER, "billing") == tokens.caller_of(b"c" * 20)
    digest = hashlib.sha256(b"r" * 20).hexdigest()[:12]
    assert tokens.caller_of(b"r" * 20) == Caller(Role.READER, f"token-{digest}")
    assert tokens.caller_of(b"x:" * 10) == Caller(Role.ADMIN, "ops@example")
    consumer = Tokens.parse("consumer:billing.eu:" + "k" * 20, "t", lines=False).caller_of(b"k" * 20)
    assert consumer == Caller(Role.CONSUMER, "billing.eu") and Role.READER < Role.CONSUMER < Role.WRITER
    assert Tokens.parse("writer:" + "tok:en" * 4, "t", lines=False).caller_of(b"tok:en" * 4) is None  # 'tok' a name
    with pytest.raises(TokenError, match="another role or name"):
        Tokens.parse("writer:a:" + "z" * 20 + ",writer:b:" + "z" * 20, "tokens", lines=False)
