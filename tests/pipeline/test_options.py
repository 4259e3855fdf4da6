"""The data source's options: every mistake is refused before anything is read, in the user's own terms."""

from __future__ import annotations

import pytest

from raftlog.pipeline.options import PipelineError, parse_options


@pytest.mark.parametrize(("options", "message"), [
    ({}, "give either option 'url'"),
    ({"url": "http://a", "path": "/d"}, "give either option 'url'"),
    ({"url": "a:7200"}, "'a:7200' is not an http:// or https:// URL"),
    ({"url": "http://a", "bogus": "1"}, "unknown option bogus"),
    ({"url": "http://a", "committedonly": "true"}, "option committedOnly is not for a read of a running cluster"),
    ({"path": "/d", "numpartitions": "3"}, "option numPartitions is not for a read of a data directory"),
    ({"url": "http://a", "startindex": "9", "endindex": "3"}, "startIndex 9 is above endIndex 3"),
    ({"url": "http://a", "partitionsize": "10", "numpartitions": "2"}, "partitionSize or numPartitions, not both"),
    ({"url": "http://a", "numpartitions": "0"}, "numPartitions must be at least 1"),
    ({"url": "http://a", "decode": "latin-1"}, "decode='latin-1' is not supported"),
    ({"path": "/d", "oncorrupt": "ignore"}, "onCorrupt must be 'fail' or 'mark'"),
    ({"url": "http://a", "timeout": "-1"}, "timeout must be positive"),
])
def test_a_bad_option_is_refused_with_its_name(options: dict[str, str], message: str) -> None:
    with pytest.raises(PipelineError, match=message):
        parse_options(options)


def test_ranges_are_even_and_cover_the_span_once() -> None:
    split = parse_options({"url": "http://a", "numpartitions": "3"}).split(10, 19)
    assert split == [(10, 13), (14, 17), (18, 19)]
    sized = parse_options({"url": "http://a", "partitionsize": "4"}).split(0, 9)
    assert sized == [(0, 3), (4, 7), (8, 9)]
    assert parse_options({"url": "http://a"}).split(5, 4) == []
