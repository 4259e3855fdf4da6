"""A member installed without a C compiler runs the batch codec's Python reference, and says so."""

from __future__ import annotations

import pytest

from raftlog.app.server import codec_warnings
from raftlog.storage import batch, codec
from raftlog.storage.batch import reference_encode


def test_a_member_without_the_compiled_codec_says_so_at_start_and_encodes_in_python(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert codec_warnings() == []  # make test builds it
    monkeypatch.setattr(codec, "compiled", None)
    (warning,) = codec_warnings()
    assert "(storage/_codec.c) is not built" in warning
    encoded = batch.encode_leader_batch([b"one", b"two"], 7, 2, 1, 0, 0, 5, 4096)
    assert bytes(encoded.data) == bytes(reference_encode([b"one", b"two"], 7, 2, 1, 0, 0, 5, 4096).data)
