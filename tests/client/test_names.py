"""``names``: the one tube-name rule and the one address parser (no server needed)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cmdstalk_py.client.names import (
    TUBE_NAME_CHARS,
    format_address,
    is_tube_name,
    parse_address,
    tube_bytes,
    validate_tube,
)


def test_tube_names_follow_the_protocol() -> None:
    for ok in ("default", "a-b+c/d;e.f$g_h(i)", "x" * 200, "(", "9"):
        assert validate_tube(ok) == ok
        assert is_tube_name(ok.encode())
        assert tube_bytes(ok) == ok.encode()
    for bad in ("", "-lead", "sp ace", "x" * 201, "é", "a\n", "tab\t", "a]"):
        with pytest.raises(ValueError, match="invalid tube name"):
            validate_tube(bad)
        assert not is_tube_name(bad.encode())


@given(st.binary(max_size=210))
def test_the_str_and_bytes_forms_of_the_rule_agree(name: bytes) -> None:
    by_chars = 0 < len(name) <= 200 and name[:1] != b"-" and set(name) <= TUBE_NAME_CHARS
    assert is_tube_name(name) == by_chars
    text = name.decode("latin-1")
    try:
        validate_tube(text)
    except ValueError:
        assert not by_chars
    else:
        assert by_chars


def test_parse_address() -> None:
    assert parse_address("127.0.0.1:11300") == ("127.0.0.1", 11300)
    assert parse_address(" localhost:1 ") == ("localhost", 1)
    assert parse_address("[::1]:11300") == ("::1", 11300)
    for bad in ("", "localhost", "h:x", "h:0", "h:70000", "::1:5", "[::1]", "[::1", ":5"):
        with pytest.raises(ValueError, match="malformed address"):
            parse_address(bad)


def test_parse_address_with_a_default_port() -> None:
    assert parse_address("example.org", 11300) == ("example.org", 11300)
    assert parse_address("[::1]", 11300) == ("::1", 11300)
    assert parse_address("[::1]:7", 11300) == ("::1", 7)
    assert parse_address("h:8", 11300) == ("h", 8)
    for bad in ("", "h:x", "h:0", "[::1"):
        with pytest.raises(ValueError):
            parse_address(bad, 11300)


def test_format_address_round_trips() -> None:
    for host, port in (("127.0.0.1", 1), ("::1", 11300), ("example.org", 65535)):
        assert parse_address(format_address(host, port)) == (host, port)


def test_names_imports_no_client_library() -> None:
    # The server imports the rule: it must not pull greenstalk or tenacity in.
    code = (
        "import sys; import cmdstalk_py.client.names; "
        "print(sorted({'greenstalk', 'tenacity'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
