"""A throwaway CA and certificates for tests of TLS (trustme), as PEM files."""

from __future__ import annotations

import ssl
from pathlib import Path

import trustme


class Pki:
    """A CA and a certificate for 127.0.0.1, written as PEM files."""

    def __init__(self, root: Path, name: str) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.ca = trustme.CA(organization_name=name)
        issued = self.ca.issue_cert("127.0.0.1", "localhost")  # for serving and for calling (both usages)
        self.ca_file, self.cert, self.key = root / f"{name}-ca.pem", root / f"{name}.pem", root / f"{name}.key"
        self.ca.cert_pem.write_to_path(str(self.ca_file))
        issued.private_key_pem.write_to_path(str(self.key))
        for i, pem in enumerate(issued.cert_chain_pems):
            pem.write_to_path(str(self.cert), append=i > 0)

    def client_context(self, with_cert: bool = False) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        if with_cert:
            context.load_cert_chain(str(self.cert), str(self.key))
        return context
