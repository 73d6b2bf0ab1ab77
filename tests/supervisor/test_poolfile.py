"""The config file (issue #18): every key, inheritance, globs, limits and rates, bad files."""

from __future__ import annotations

import fnmatch
from pathlib import Path

import click
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cmdstalk_py.supervisor.cli import command
from cmdstalk_py.supervisor.config import SUPERVISOR_FIELDS, Config, is_glob
from cmdstalk_py.supervisor.overlaps import first_overlap
from cmdstalk_py.supervisor.poolfile import (
    PoolFileError,
    load_pools,
    parse_rate,
    pool_keys,
)

REPO = Path(__file__).resolve().parents[2]


def load(tmp_path: Path, text: str) -> tuple[Config, ...]:
    path = tmp_path / "pools.toml"
    path.write_text(text)
    return load_pools(path)


def one(tmp_path: Path, text: str) -> Config:
    (pool,) = load(tmp_path, text)
    return pool


def bad(tmp_path: Path, text: str) -> PoolFileError:
    with pytest.raises(PoolFileError) as info:
        load(tmp_path, text)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{tmp_path / 'pools.toml'}: ")
    return info.value


EVERY_KEY = """
address = ["10.0.0.5:11301", "[::1]:11300"]
[pools.p]
tubes = ["a", "b.*"]
workers = 3
command = "tr a-z A-Z"
shell = ["/bin/sh", "-c"]
cwd = "."
discover_interval = 0.5
max_releases = 7
max_timeouts = 2
backoff_exponent = 2.5
backoff_max = 60
kill_grace = 3
ttr_margin = 0.5
bury_exit_codes = [65, 78]
[pools.p.env]
A = "1"
[pools.p.limits]
a = 2
[pools.p.rates]
a = "30/m"
"""


def test_every_key_lands_in_the_pool_config(tmp_path: Path) -> None:
    p = one(tmp_path, EVERY_KEY)
    assert (p.pool, p.host, p.port) == ("p", "10.0.0.5", 11301)
    assert p.servers == (("10.0.0.5", 11301), ("::1", 11300))
    assert (p.tubes, p.all_tubes, p.workers) == (("a", "b.*"), False, 3)
    assert (p.cmd, p.shell, p.cwd) == ("tr a-z A-Z", ("/bin/sh", "-c"), str(tmp_path))
    assert (p.discover_interval, p.max_releases, p.max_timeouts) == (0.5, 7, 2)
    assert (p.backoff_exponent, p.backoff_max, p.kill_grace, p.ttr_margin) == (2.5, 60, 3.0, 0.5)
    assert p.bury_exit_codes == frozenset({65, 78})
    assert (p.env, p.tube_limits, p.tube_rates) == ((("A", "1"),), (("a", 2),), (("a", 0.5, 1.0),))


def test_every_pool_flag_of_cmdstalk_is_a_file_key() -> None:
    # Built from the flags themselves: a pool flag added later (#18, #19) is a key at once.
    names = {f for f in Config.__dataclass_fields__} - SUPERVISOR_FIELDS
    spelled = {"all_tubes": "all", "cmd": "command", "tube_limits": "limits", "tube_rates": "rates"}
    for param in command.params:
        if isinstance(param, click.Option) and param.name in names:
            assert spelled.get(param.name, param.name) in pool_keys(), param.name


def test_the_flags_string_forms_work_too(tmp_path: Path) -> None:
    p = one(tmp_path, 'address = "h1:1,h2:2"\n[pools.x]\ncommand = "c"\nshell = "/bin/sh -c"\n'
            'bury_exit_codes = "65 78"\n')
    assert p.servers == (("h1", 1), ("h2", 2)) and p.shell == ("/bin/sh", "-c")
    assert p.bury_exit_codes == frozenset({65, 78})


def test_defaults_are_those_of_the_flags(tmp_path: Path) -> None:
    p = one(tmp_path, '[pools.x]\ncommand = "cat"\n')
    assert p == Config(cmd="cat", pool="x", shell=p.shell)
    assert p.shell == ("/bin/bash", "-c") and p.tubes == ("default",) and p.per_tube == 1


INHERIT = """
address = "127.0.0.1:11311"
command = "cat"
per_tube = 2
max_releases = 3
tubes = ["t1"]
[env]
A = "top"
B = "top"
[pools.first]
[pools.second]
tubes = "s.*"
workers = 5
max_releases = 4
[pools.second.env]
B = "pool"
[pools.third]
all = true
address = "127.0.0.1:11312"
"""


def test_top_level_keys_are_defaults_that_a_pool_overrides(tmp_path: Path) -> None:
    first, second, third = load(tmp_path, INHERIT)
    assert (first.port, first.cmd, first.tubes, first.per_tube, first.max_releases) == (
        11311, "cat", ("t1",), 2, 3,
    )
    assert first.env == (("A", "top"), ("B", "top"))
    # workers replaces the inherited per_tube; tubes and all replace each other.
    assert (second.tubes, second.workers, second.per_tube, second.max_releases) == (
        ("s.*",), 5, 1, 4,
    )
    assert dict(second.env) == {"A": "top", "B": "pool"}
    assert third.all_tubes and third.tubes == ("default",)


@pytest.mark.parametrize(
    ("tubes", "expect"),
    [
        ('"*"', ((), True)),
        ('["a", "*"]', ((), True)),
        ('"mail.*"', (("mail.*",), False)),
        ('["img.[0-9]", "x?", "plain"]', (("img.[0-9]", "x?", "plain"), False)),
    ],
)
def test_tubes_as_list_glob_or_all(
    tmp_path: Path, tubes: str, expect: tuple[tuple[str, ...], bool]
) -> None:
    p = one(tmp_path, f'[pools.x]\ncommand = "cat"\ntubes = {tubes}\n')
    assert (p.tubes if not p.all_tubes else (), p.all_tubes) == expect


@pytest.mark.parametrize(
    ("value", "rate"),
    # The burst defaults to one second's starts, as for --tube-rate (config.default_burst).
    [('"5/s"', (5.0, 5.0)), ('"30/m"', (0.5, 1.0)), ('"36/h"', (0.01, 1.0)), ("2", (2.0, 2.0)),
     ("2.5", (2.5, 2.5)), ("{ rate = 5, burst = 10 }", (5.0, 10.0)), ('"5/s:10"', (5.0, 10.0)),
     ("{ rate = 5 }", (5.0, 5.0)),
     ('{ rate = "120/m", burst = 3 }', (2.0, 3.0))],
)
def test_rates(tmp_path: Path, value: str, rate: tuple[float, float]) -> None:
    p = one(tmp_path, f'[pools.x]\ncommand = "c"\ntubes = ["t"]\n[pools.x.rates]\nt = {value}\n')
    assert p.tube_rates == (("t", *rate),)


def test_parse_rate_alone() -> None:
    assert parse_rate("10/s") == (10.0, 10.0)
    assert parse_rate({"rate": "6/m", "burst": 2}) == (0.1, 2.0)


def test_limits_and_rates_may_name_a_tube_a_glob_or_all_serves(tmp_path: Path) -> None:
    p = one(tmp_path, '[pools.x]\ncommand = "c"\ntubes = "img.*"\nlimits = { "img.big" = 1 }\n')
    assert p.tube_limits == (("img.big", 1),)
    p = one(tmp_path, '[pools.x]\ncommand = "c"\nall = true\nrates = { any = "1/s" }\n')
    assert p.tube_rates == (("any", 1.0, 1.0),)


def test_pools_on_different_servers_may_serve_the_same_tube(tmp_path: Path) -> None:
    a, b = load(tmp_path, """
        [pools.a]
        command = "c"
        address = "127.0.0.1:11300"
        [pools.b]
        command = "c"
        address = "127.0.0.1:11301"
    """)
    assert a.tubes == b.tubes == ("default",)


def test_two_globs_may_overlap(tmp_path: Path) -> None:
    pools = load(tmp_path, '[pools.a]\ncommand="c"\ntubes="a.*"\n[pools.b]\ncommand="c"\n'
                 'tubes="*.b"\n')
    assert len(pools) == 2


BAD = [
    ("[pools.x]\ncommand = 'c'\nworkers = \n", "", "line 3"),
    ("[pools.x]\ncommand = 'c'\nwrokers = 2\n", "pools.x.wrokers", "unknown key"),
    ("wrokers = 2\n[pools.x]\ncommand = 'c'\n", "wrokers", "unknown key"),
    ("log_level = 'DEBUG'\n[pools.x]\ncommand = 'c'\n", "log_level", "--log-level is a command"),
    ("[pools.x]\ncommand = 'c'\nworkers = '4'\n", "pools.x.workers", "expected a whole number"),
    ("[pools.x]\ncommand = 'c'\nworkers = true\n", "pools.x.workers", "got boolean"),
    ("[pools.x]\ncommand = 'c'\nworkers = -1\n", "pools.x.workers", "not in the range"),
    ("[pools.x]\ncommand = 'c'\nper_tube = 0\n", "pools.x.per_tube", "not in the range"),
    ("[pools.x]\ncommand = 'c'\nworkers = 2\nper_tube = 2\n", "pools.x", "not both"),
    ("workers = 2\nper_tube = 2\n[pools.x]\ncommand = 'c'\n", "per_tube", "not both"),
    ("[pools.x]\ncommand = 'c'\nall = true\ntubes = ['a']\n", "pools.x", "not both"),
    ("[pools.x]\ncommand = 'c'\nmax_releases = 1.5\n", "pools.x.max_releases", "whole number"),
    ("[pools.x]\ncommand = 'c'\nkill_grace = 'x'\n", "pools.x.kill_grace", "expected a number"),
    ("[pools.x]\ncommand = 'c'\nbackoff_exponent = 11\n", "pools.x.backoff_exponent", "range"),
    ("[pools.x]\ncommand = 'c'\nkill_grace = nan\n", "pools.x.kill_grace", "not a finite"),
    ("[pools.x]\ncommand = 'c'\nbury_exit_codes = [0]\n", "pools.x.bury_exit_codes", "1-255"),
    ("[pools.x]\ncommand = 'c'\nshell = ''\n", "pools.x.shell", "must not be empty"),
    ("[pools.x]\ncommand = '  '\n", "pools.x.command", "must not be empty"),
    ("[pools.x]\ntubes = ['a']\n", "pools.x.command", "missing"),
    ("command = 'c'\n", "pools", "no pools"),
    ("pools = 3\n", "pools", "expected a table"),
    ("[pools.x]\ncommand = 'c'\ntubes = ['-bad']\n", "pools.x.tubes", "invalid tube name"),
    ("[pools.x]\ncommand = 'c'\ntubes = ['a,b']\n", "pools.x.tubes", "invalid tube name"),
    ("[pools.x]\ncommand = 'c'\ntubes = 'ma!l.*'\n", "pools.x.tubes", "'ma!l.*'"),
    ("[pools.x]\ncommand = 'c'\ntubes = []\n", "pools.x.tubes", "empty"),
    ("[pools.x]\ncommand = 'c'\ntubes = ['a', 'a']\n", "pools.x.tubes", "twice"),
    ("[pools.x]\ncommand = 'c'\ntubes = [1]\n", "pools.x.tubes", "list of strings"),
    ("[pools.x]\ncommand = 'c'\naddress = 'nohost'\n", "pools.x.address", "malformed address"),
    ("address = 'h:99999'\n[pools.x]\ncommand = 'c'\n", "address", "port must be"),
    ("env = { A = 1 }\n[pools.x]\ncommand = 'c'\n", "env.A", "expected a string"),
    ("[pools.x]\ncommand = 'c'\naddress = ['a:1', 'a:1']\n", "pools.x.address", "twice"),
    ("[pools.x]\ncommand = 'c'\ncwd = '/nonexistent/dir'\n", "pools.x.cwd", "not a directory"),
    ("[pools.x]\ncommand = 'c'\nenv = { A = 1 }\n", "pools.x.env.A", "expected a string"),
    ("[pools.x]\ncommand = 'c'\nenv = { '1A' = 'v' }\n", "pools.x.env.1A", "not an environment"),
    ("[pools.x]\ncommand = 'c'\nlimits = { default = 0 }\n", "pools.x.limits.default", "below 1"),
    ("[pools.x]\ncommand = 'c'\nlimits = { other = 1 }\n", "pools.x.limits.other", "not one of"),
    ("[pools.x]\ncommand = 'c'\nlimits = { 'a*' = 1 }\n", 'pools.x.limits."a*"', "not a glob"),
    ("[pools.x]\ncommand = 'c'\nlimits = { default = '2' }\n", "pools.x.limits.default", "whole"),
    ("[pools.x]\ncommand = 'c'\nrates = { default = '5/x' }\n", "pools.x.rates.default", "N/s"),
    ("[pools.x]\ncommand = 'c'\nrates = { default = 0 }\n", "pools.x.rates.default", "not above 0"),
    ("[pools.x]\ncommand = 'c'\nrates = { default = '1e999/s' }\n", "pools.x.rates.default",
     "at most"),
    ("[pools.x]\ncommand = 'c'\nrates = { default = { rate = 1, burst = 0 } }\n",
     "pools.x.rates.default.burst", "below 1"),
    ("[pools.x]\ncommand = 'c'\nrates = { default = { rate = 1, brust = 2 } }\n",
     "pools.x.rates.default.brust", "unknown key"),
    ("[pools.'a b']\ncommand = 'c'\n", 'pools."a b"', "pool name"),
    ("[pools.a]\ncommand = 'c'\ntubes = ['t']\n[pools.b]\ncommand = 'c'\ntubes = ['u', 't']\n",
     "pools.b.tubes", "also served by pool 'a'"),
    ("[pools.a]\ncommand = 'c'\ntubes = 'm.*'\n[pools.b]\ncommand = 'c'\ntubes = 'm.x'\n",
     "pools.b.tubes", "tube 'm.x'"),
    ("[pools.a]\ncommand = 'c'\nall = true\n[pools.b]\ncommand = 'c'\ntubes = 'z'\n",
     "pools.b.tubes", "every tube"),
]


@pytest.mark.parametrize(
    ("text", "key", "what"), BAD, ids=[f"{k or 'syntax'}-{w}" for _, k, w in BAD]
)
def test_a_bad_file_is_one_line_naming_the_file_and_the_key(
    tmp_path: Path, text: str, key: str, what: str
) -> None:
    error = bad(tmp_path, text)
    assert error.key == key
    assert what in str(error)


def test_a_missing_file_names_it(tmp_path: Path) -> None:
    with pytest.raises(PoolFileError, match="No such file"):
        load_pools(tmp_path / "absent.toml")


def test_the_example_file_loads() -> None:
    pools = load_pools(REPO / "examples" / "pools.toml")
    assert [p.pool for p in pools] == ["quick", "background", "reports"]
    quick, background, reports = pools
    assert quick.per_tube == 2 and quick.cwd == str(REPO / "examples")
    assert background.workers == 3 and background.tube_limits == (("slow.sh", 1),)
    assert background.tube_rates == (("flaky.py", 2.0, 4.0),)
    assert reports.tubes == ("report.*",) and dict(reports.env)["APP_ENV"] == "example"


@pytest.mark.parametrize(
    ("flag", "key", "value"),
    [("--tube-rate", "rates", '"1e300/s"'), ("--tube-rate", "rates", '"5/s:2000000"'),
     ("--tube-limit", "limits", "2000000"), ("--tube-limit", "limits", "0")],
)
def test_flag_and_file_share_one_rule(tmp_path: Path, flag: str, key: str, value: str) -> None:
    """A limit or rate the file refuses, the flag refuses too, and the other way round."""
    text = value.strip('"')
    with pytest.raises(click.BadParameter):
        command.make_context("cmdstalk", ["--cmd", "c", "--tubes", "t", flag, f"t={text}"])
    with pytest.raises(PoolFileError):
        one(tmp_path, f'[pools.x]\ncommand = "c"\ntubes = ["t"]\n[pools.x.{key}]\nt = {value}\n')


@pytest.mark.parametrize("glob", ["-*", "a b*", "[ab]x y"])
def test_flag_and_file_share_the_glob_rule(tmp_path: Path, glob: str) -> None:
    with pytest.raises(click.BadParameter):
        command.make_context("cmdstalk", ["--cmd", "c", "--tubes", glob])
    with pytest.raises(PoolFileError):
        one(tmp_path, f'[pools.x]\ncommand = "c"\ntubes = ["{glob}"]\n')


OVERLAPS = [
    # (tubes of pool a, of pool b, the tube named, or None: no overlap)
    ('"m.*"', '"m.x"', "tube 'm.x'"),
    ('"m.x"', '"*.x"', "tube 'm.x'"),  # a later glob, matched by its fixed end
    ('"m.x"', '"m?x"', "tube 'm.x'"),
    ('"ab-cd"', '"*b-c*"', "tube 'ab-cd'"),  # no fixed start or end
    ('"m.*"', '"m.*"', "tube 'm.*'"),  # the same glob twice
    ('"m.*"', '"*.x"', None),  # two globs may or may not meet
    ('"m.x"', '"m.y"', None),
]


@pytest.mark.parametrize(("a", "b", "clash"), OVERLAPS)
def test_tubes_overlap_by_name_glob_or_twice(
    tmp_path: Path, a: str, b: str, clash: str | None
) -> None:
    text = f'[pools.a]\ncommand = "c"\ntubes = [{a}]\n[pools.b]\ncommand = "c"\ntubes = [{b}]\n'
    if clash is None:
        assert len(load(tmp_path, text)) == 2
        return
    error = bad(tmp_path, text)
    assert error.key == "pools.b.tubes"
    assert error.what == f"{clash} is also served by pool 'a' on the same server"


def test_pools_on_different_servers_may_share_tubes(tmp_path: Path) -> None:
    text = (
        '[pools.a]\ncommand = "c"\nall = true\naddress = "h1:1"\n'
        '[pools.b]\ncommand = "c"\ntubes = ["t", "u.*"]\naddress = "h2:1"\n'
        '[pools.c]\ncommand = "c"\ntubes = ["t"]\naddress = ["h3:1", "h2:1"]\n'
    )
    error = bad(tmp_path, text)  # b and c meet on h2, a is alone on h1
    assert (error.key, error.what) == ("pools.c.tubes", "tube 't' is also served by pool 'b' "
                                       "on the same server")


def test_the_first_pool_that_overlaps_is_named_with_the_earliest_it_meets(
    tmp_path: Path,
) -> None:
    text = "".join(
        f'[pools.{name}]\ncommand = "c"\ntubes = [{tubes}]\n'
        for name, tubes in [("a", '"y.*"'), ("b", '"x"'), ("c", '"x", "y.1"'), ("d", '"x"')]
    )
    error = bad(tmp_path, text)
    assert (error.key, error.what) == ("pools.c.tubes", "tube 'y.1' is also served by pool "
                                       "'a' on the same server")


def test_many_pools_of_many_tubes_load(tmp_path: Path) -> None:
    """The check indexes names per server: 200 pools of 200 tubes (names and globs)."""
    text = "".join(
        f'[pools.p{p}]\ncommand = "c"\ntubes = ['
        + ", ".join(f'"t{p}-{t}{".*" if p % 2 else ""}"' for t in range(200))
        + "]\n"
        for p in range(200)
    )
    assert len(load(tmp_path, text)) == 200


def _reference_overlap(configs: list[Config]) -> tuple[int, int] | None:
    """Every pair compared, as the rule reads: (later, earlier) of the first overlap."""
    def meet(x: str, y: str) -> bool:
        return x == y or (not is_glob(x) and fnmatch.fnmatchcase(x, y)) or (
            not is_glob(y) and fnmatch.fnmatchcase(y, x))

    for j, b in enumerate(configs):
        for i, a in enumerate(configs[:j]):
            if not set(a.addresses) & set(b.addresses):
                continue
            if a.all_tubes or b.all_tubes or any(meet(x, y) for x in a.tubes for y in b.tubes):
                return j, i
    return None


_TUBE = st.text("ab.", min_size=1, max_size=3)
_GLOB = st.builds(lambda s, w, e: s + w + e, st.text("ab.", max_size=2), st.sampled_from("*?"),
                  st.text("ab.", max_size=2))
_POOL = st.tuples(
    st.booleans(),
    st.lists(st.one_of(_TUBE, _GLOB), min_size=1, max_size=4, unique=True),
    st.sets(st.integers(1, 3), min_size=1, max_size=2),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_POOL, min_size=1, max_size=6))
def test_the_indexed_overlap_check_agrees_with_comparing_every_pair(
    pools: list[tuple[bool, list[str], set[int]]],
) -> None:
    configs = [
        Config(cmd="c", pool=f"p{n}", all_tubes=every and n % 3 == 0, tubes=tuple(tubes),
               servers=tuple(("h", port) for port in sorted(ports)))
        for n, (every, tubes, ports) in enumerate(pools)
    ]
    found = first_overlap(configs)
    expected = _reference_overlap(configs)
    got = None if found is None else (configs.index(found.later), configs.index(found.earlier))
    assert got == expected
