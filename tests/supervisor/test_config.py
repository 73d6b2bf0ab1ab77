"""config.py parsers: what the command line accepts and the one-line errors it gives."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest

from cmdstalk_py.supervisor.config import (
    Config,
    parse_address,
    parse_exit_codes,
    parse_shell,
    parse_tubes,
    validate_cmd,
    validate_tube,
)


def test_parse_address() -> None:
    assert parse_address("127.0.0.1:11300") == ("127.0.0.1", 11300)
    assert parse_address("localhost:1") == ("localhost", 1)
    assert parse_address("[::1]:11300") == ("::1", 11300)


@pytest.mark.parametrize(
    "bad", ["", "127.0.0.1", "127.0.0.1:", ":11300", "h:0", "h:65536", "h:x", "::1:5", "[::1]"]
)
def test_parse_address_rejects(bad: str) -> None:
    with pytest.raises(ValueError, match="malformed address"):
        parse_address(bad)


def test_tube_names() -> None:
    ok = "A-z0+9/;.$_()"
    assert validate_tube(ok) == ok
    assert validate_tube("x" * 200)
    for bad in ["", "-lead", "sp ace", "x" * 201, "é", "a*b"]:
        with pytest.raises(ValueError, match="invalid tube name"):
            validate_tube(bad)


def test_parse_tubes_splits_commas_and_repeats_keeps_order_once() -> None:
    assert parse_tubes(["a,b", "c", "a"]) == ("a", "b", "c")
    with pytest.raises(ValueError):
        parse_tubes([" , "])
    with pytest.raises(ValueError, match="invalid tube name"):
        parse_tubes(["ok,-bad"])


def test_exit_codes_and_shell_and_cmd() -> None:
    assert parse_exit_codes("65,78 3") == frozenset({3, 65, 78})
    assert parse_exit_codes("") == frozenset()
    for bad in ["0", "256", "x"]:
        with pytest.raises(ValueError, match="invalid exit code"):
            parse_exit_codes(bad)
    assert parse_shell("/bin/sh -ec") == ("/bin/sh", "-ec")
    with pytest.raises(ValueError):
        parse_shell("  ")
    with pytest.raises(ValueError):
        validate_cmd(" ")


def test_config_argv_and_address() -> None:
    c = Config(cmd="tr a-z A-Z")
    assert c.argv() == ["/bin/bash", "-c", "tr a-z A-Z"]
    assert c.address == "127.0.0.1:11300"
    assert Config(cmd="x", host="::1", port=5).address == "[::1]:5"


@pytest.mark.parametrize("name", ["kill_grace", "backoff_exponent", "discover_interval",
                                  "ttr_margin", "shutdown_timeout"])
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_a_config_built_in_code_refuses_non_finite_numbers(name: str, value: float) -> None:
    with pytest.raises(ValueError, match=name):
        changes: dict[str, Any] = {name: value}
        dataclasses.replace(Config(cmd="cat"), **changes)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"on_timeout": "delete"}, "on_timeout: invalid timeout action 'delete'"),
        ({"on_timeout": "Bury"}, "on_timeout: 'Bury' is not lower case"),
        ({"on_exit": ((3, "explode"),)}, "on_exit: invalid exit rule '3=explode'"),
        ({"on_exit": ((300, "bury"),)}, "on_exit: invalid exit code '300'"),
        ({"tube_limits": (("img", 0),)}, "tube_limits: tube 'img': 0 is below 1"),
        ({"tube_limits": (("img", 2_000_000),)}, "tube_limits: tube 'img': 2000000 is above"),
        ({"tube_limits": (("-img", 1),)}, "tube_limits: tube '-img': invalid tube name"),
        ({"tube_rates": (("img", float("nan"), 1.0),)}, "tube_rates: tube 'img': rate nan/s"),
        ({"tube_rates": (("img", 0.0, 1.0),)}, "not above 0"),
        ({"tube_rates": (("img", 1.0, 0.5),)}, "tube_rates: tube 'img': burst 0.5 is below 1"),
        ({"workers": 0}, "workers 0 is not within 1-1000"),
        ({"workers": 1001}, "workers 1001 is not within 1-1000"),
        ({"per_tube": 0}, "per_tube 0 is not within 1-1000"),
    ],
)
def test_a_config_built_in_code_is_checked_by_the_parsers_rules(
    fields: dict[str, Any], message: str
) -> None:
    """The Spark drain and tests build Configs without the flags: the same rules apply,
    as one ValueError line naming the field."""
    with pytest.raises(ValueError) as e:
        Config(cmd="cat", **fields)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_config_built_in_code_with_good_values() -> None:
    config = Config(
        cmd="cat", workers=2, tube_limits=(("img", 2),), tube_rates=(("img", 0.5, 1.0),),
        on_exit=((0, "delete"), (3, "bury")), on_timeout="release",
    )  # fmt: skip
    assert config.run_limit(60) == (60.0, "ttr")
