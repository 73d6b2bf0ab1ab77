"""``replies`` and ``errors``: pure parsers and the reply table, no server needed.

greenstalk's private parsers are the oracle for the YAML: same values for any flat YAML a
beanstalkd writes.
"""

from __future__ import annotations

import greenstalk
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from cmdstalk_py.client import errors
from cmdstalk_py.client.replies import parse_int, parse_list, parse_reply, parse_stats


@given(
    st.dictionaries(
        st.from_regex(r"[a-z][a-z-]{0,15}", fullmatch=True),
        st.one_of(
            st.integers(-(2**63), 2**64),
            st.from_regex(r"[A-Za-z0-9._/ +-]{0,20}", fullmatch=True),
            st.from_regex(r'"[A-Za-z0-9.]{0,8}"', fullmatch=True),
        ),
    )
)
def test_parse_stats_matches_greenstalk_on_any_flat_yaml(fields: dict[str, object]) -> None:
    body = ("---\n" + "".join(f"{k}: {v}\n" for k, v in fields.items())).encode()
    values = [str(v) for v in fields.values()]
    # greenstalk's int() also takes " 5", "+5" and "1_000", which no beanstalkd writes.
    assume(not any(v != v.strip() or v.startswith("+") or "_" in v for v in values))
    assert parse_stats(body) == greenstalk._parse_stats(body)


@given(st.lists(st.from_regex(r"[A-Za-z0-9+/;.$_()-]{1,20}", fullmatch=True)))
def test_parse_list_matches_greenstalk(items: list[str]) -> None:
    body = ("---\n" + "".join(f"- {item}\n" for item in items)).encode()
    assert parse_list(body) == greenstalk._parse_list(body) == items


@pytest.mark.parametrize("body", [b"id: 1\n", b"---\nid 1\n", b"---\nid: \xff\n"])
def test_parse_stats_rejects_what_is_not_a_stats_reply(body: bytes) -> None:
    with pytest.raises(errors.UnexpectedReply):
        parse_stats(body)


@pytest.mark.parametrize("body", [b"- a\n", b"---\na\n"])
def test_parse_list_rejects_what_is_not_a_list(body: bytes) -> None:
    with pytest.raises(errors.UnexpectedReply):
        parse_list(body)


def test_parse_reply_gives_the_values_or_the_error_of_the_word() -> None:
    assert parse_reply(b"RESERVED 7 5", b"RESERVED", 2) == [b"7", b"5"]
    assert parse_reply(b"DELETED", b"DELETED", 0) == []
    with pytest.raises(errors.NotFound):
        parse_reply(b"NOT_FOUND", b"DELETED", 0)
    with pytest.raises(errors.Buried, match="BURIED 12"):
        parse_reply(b"BURIED 12", b"INSERTED", 1)
    for line in (b"RESERVED 7", b"RESERVED 7 5 3", b"WHAT", b""):
        with pytest.raises(errors.UnexpectedReply):
            parse_reply(line, b"RESERVED", 2)
    assert parse_int(b"42") == 42
    for bad in (b"x", b"-1", b""):
        with pytest.raises(errors.UnexpectedReply):
            parse_int(bad)


def test_reply_words_map_to_the_classes_greenstalk_maps_them_to() -> None:
    # The same words, and each one's class tells the same story (by its reply word).
    assert set(errors.ERROR_REPLIES) == set(greenstalk.ERROR_RESPONSES)
    for word, cls in errors.ERROR_REPLIES.items():
        assert cls.reply.encode() == word
        assert issubclass(cls, errors.ReplyError)
    assert isinstance(errors.error_for(b"JOB_TOO_BIG"), errors.JobTooBig)
    assert isinstance(errors.error_for(b"DRAINING"), errors.Draining)
    assert isinstance(errors.error_for(b"BURIED 12"), errors.Buried)
    assert isinstance(errors.error_for(b"WHAT"), errors.UnexpectedReply)
    assert issubclass(errors.UnexpectedReply, errors.ConnectionFailure)
    assert issubclass(errors.ConnectionLost, errors.ConnectionFailure)
