"""The config file, ``cmdstalk --config pools.toml``: TOML in, one ``Config`` per pool out.

Top-level keys are defaults every ``[pools.NAME]`` table inherits; a pool's own keys win,
and its ``env``, ``limits`` and ``rates`` tables are merged entry by entry over the
defaults'. Every pool option that has a flag is a key spelled like the flag
(``max_releases`` for ``--max-releases``, ``all`` for ``--all``, ``command`` for ``--cmd``)
and its value goes through that flag's own type and parser (``cli.command``): a bound or a
rule is written once, and a flag added later is a key at once. Keys whose file form differs
from the flag's (tubes, address, workers, cwd, env, limits, rates) are read here.
Supervisor-wide options (logging, event log, metrics, ``--max-jobs``,
``--shutdown-timeout``, ``--embedded``) stay on the command line.

Any error is one ``PoolFileError`` line naming the file, the key and what is wrong: an
unknown key is an error, so a typo is never silently ignored. The bytes come from
``fileread`` (one regular file, bounded, never blocking) through ``tomlread`` (bounded
time); names in messages are written by ``keytext`` (escaped, never raw).
"""

from __future__ import annotations

import fnmatch
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import click

from cmdstalk_py.supervisor import cli, tomlread
from cmdstalk_py.supervisor.config import (
    SUPERVISOR_FIELDS,
    Config,
    check_burst,
    check_limit,
    check_rate,
    default_burst,
    is_glob,
    no_nul,
    parse_address,
    validate_tube,
    validate_tube_or_glob,
)
from cmdstalk_py.supervisor.config import parse_rate as parse_rate_text
from cmdstalk_py.supervisor.fileread import FileReadError, read_regular
from cmdstalk_py.supervisor.keytext import clip, join_key, printable
from cmdstalk_py.supervisor.overlaps import first_overlap

# File keys spelled unlike their flag's parameter name (limits and rates: tables, below).
FILE_KEYS = {"all_tubes": "all", "cmd": "command", "tube_limits": "limits", "tube_rates": "rates"}
# Keys read here, not through a flag, and the pairs of them that are one setting.
_SPECIAL = frozenset({"tubes", "all", "address", "workers", "cwd", "env", "limits", "rates"})
_ONE_SETTING = (("tubes", "all"), ("workers", "per_tube"))
# Flags that take a list as one string: how a TOML list becomes that string.
_LIST_TEXT: dict[str, Callable[[list[Any]], str]] = {
    "shell": lambda words: shlex.join(str(w) for w in words),
    "bury_exit_codes": lambda codes: ",".join(str(c) for c in codes),
}
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class PoolFileError(ValueError):
    """A config file that cannot be used; the message is one line: file, key, what."""

    def __init__(self, path: Path | str, key: str, what: str) -> None:
        self.path, self.key, self.what = str(path), key, what
        line = f"{path}: {key}: {what}" if key else f"{path}: {what}"
        super().__init__(printable(line))  # one line, whatever the file or its name hold


class _Bad(ValueError):
    """Raised with the key path; ``load_pools`` adds the file."""

    def __init__(self, key: str, what: str) -> None:
        super().__init__(what)
        self.key, self.what = key, what


def pool_flags() -> dict[str, click.Option]:
    """File key → the flag whose type and parser check it (pool options only)."""
    names = {f.name for f in fields(Config)} - SUPERVISOR_FIELDS
    flags: dict[str, click.Option] = {}
    for param in cli.command.params:
        if isinstance(param, click.Option) and param.name in names:
            flags[FILE_KEYS.get(param.name, param.name)] = param
    return flags


def pool_keys() -> frozenset[str]:
    """Every key a pool (or the top level, as a default) may hold."""
    return frozenset(pool_flags()) | _SPECIAL


def load_pools(path: Path) -> tuple[Config, ...]:
    """Read ``path`` (TOML) into one ``Config`` per pool; PoolFileError when it is unusable.

    Never blocks and never reads without bound (``fileread``): SIGHUP calls this from the
    loop that also acts on SIGTERM."""
    try:
        read = read_regular(path)
    except FileReadError as e:
        raise PoolFileError(path, "", str(e)) from None
    data = _toml(path, read.data)
    try:
        configs = _pools(data, read.path.parent)
        check_overlaps(configs)
    except _Bad as e:
        raise PoolFileError(path, e.key, e.what) from None
    return configs


def _toml(path: Path, raw: bytes) -> dict[str, Any]:
    try:
        return tomlread.parse(raw)
    except ValueError as e:
        raise PoolFileError(path, "", str(e)) from None


def _pools(data: dict[str, Any], base: Path) -> tuple[Config, ...]:
    flags = pool_flags()  # once per file: a file may hold thousands of pools
    keys = frozenset(flags) | _SPECIAL
    defaults = {k: v for k, v in data.items() if k != "pools"}
    _known(defaults, keys, "")
    pools = data.get("pools")
    if pools is None:
        raise _Bad("pools", "no pools: add a [pools.NAME] table")
    _expect(pools, dict, "pools", "a table of [pools.NAME] tables")
    if not pools:
        raise _Bad("pools", "no pools: add a [pools.NAME] table")
    configs: list[Config] = []
    for name, table in pools.items():
        where = join_key("pools", name)
        _expect(table, dict, where, "a table")
        _known(table, keys, where)
        _pool_name(name, where)
        merged = _inherit(defaults, table, where)
        try:
            configs.append(_pool(name, merged, base, flags))
        except _Bad as e:
            raise _where_written(e, where, table, defaults) from None
    return tuple(configs)


def _where_written(
    error: _Bad, where: str, table: dict[str, Any], defaults: dict[str, Any]
) -> _Bad:
    """An error in an inherited value names the top-level key where it is written."""
    key = error.key.removeprefix(f"{where}.").partition(".")[0]
    if error.key.startswith(f"{where}.") and key not in table and key in defaults:
        return _Bad(error.key.removeprefix(f"{where}."), error.what)
    return error


def _known(table: Mapping[str, Any], keys: frozenset[str], where: str) -> None:
    for key in table:
        if key in keys:
            continue
        hint = ""
        if any(p.name == key for p in cli.command.params):
            hint = f": --{key.replace('_', '-')} is a command-line flag, not a file key"
        raise _Bad(join_key(where, key), f"unknown key{hint}")


def _inherit(defaults: dict[str, Any], table: dict[str, Any], where: str) -> dict[str, Any]:
    """The pool's keys over the defaults; a pool setting one of a pair drops the other."""
    for pair in _ONE_SETTING:
        if all(k in table for k in pair):
            raise _Bad(where, f"give {pair[0]} or {pair[1]}, not both")
        if all(k in defaults for k in pair):
            raise _Bad(pair[1], f"give {pair[0]} or {pair[1]}, not both")
    merged = dict(defaults)
    for pair in _ONE_SETTING:
        if any(k in table for k in pair):
            for k in pair:
                merged.pop(k, None)
    for key, value in table.items():
        if key in ("env", "limits", "rates") and isinstance(merged.get(key), dict) and (
            isinstance(value, dict)
        ):
            value = {**merged[key], **value}
        merged[key] = value
    return merged


def _pool(
    name: str, table: dict[str, Any], base: Path, flags: dict[str, click.Option]
) -> Config:
    where = join_key("pools", name)
    kwargs: dict[str, Any] = {"pool": name}
    for key, value in table.items():
        if key not in _SPECIAL:
            kwargs[flags[key].name or key] = _flag_value(flags[key], value, join_key(where, key))
    if "command" not in table:
        raise _Bad(join_key(where, "command"), "missing: each pool needs a command to run")
    kwargs.update(_tubes(table, where))
    kwargs.update(_address(table.get("address"), join_key(where, "address")))
    if "workers" in table:
        kwargs["workers"] = _flag_value(
            flags.get("workers", flags["per_tube"]), table["workers"], join_key(where, "workers")
        )
    if "cwd" in table:
        kwargs["cwd"] = _cwd(table["cwd"], base, join_key(where, "cwd"))
    kwargs["env"] = _env(table.get("env", {}), join_key(where, "env"))
    served = _Served.of(kwargs.get("all_tubes", False), kwargs.get("tubes", ()))
    kwargs["tube_limits"] = _limits(table.get("limits", {}), served, join_key(where, "limits"))
    kwargs["tube_rates"] = _rates(table.get("rates", {}), served, join_key(where, "rates"))
    try:
        return Config(**kwargs)
    except ValueError as e:
        raise _Bad(where, str(e)) from None


def _flag_value(flag: click.Option, raw: Any, where: str) -> Any:
    """``raw`` (a TOML value) checked by the flag's own type and parser."""
    value = _flag_input(flag, raw, where)
    try:
        return flag.process_value(click.Context(cli.command), value)
    except click.BadParameter as e:
        raise _Bad(where, e.message.rstrip(".")) from None


def _flag_input(flag: click.Option, raw: Any, where: str) -> Any:
    """The TOML value as the flag takes it, or _Bad when its TOML type is wrong."""
    if flag.is_flag:
        return _expect(raw, bool, where, "true or false")
    if flag.multiple:
        items = _expect(raw, list, where, "a list")
        return [_expect(item, str, where, "a list of strings") for item in items]
    if isinstance(flag.type, click.types.IntParamType):
        return _expect(raw, int, where, "a whole number")
    if isinstance(flag.type, click.types.FloatParamType):
        return float(_expect(raw, (int, float), where, "a number"))
    if isinstance(raw, list) and flag.name in _LIST_TEXT:
        return _LIST_TEXT[flag.name](raw)
    return _expect(raw, str, where, "a string")


def _expect(value: Any, kind: type | tuple[type, ...], where: str, what: str) -> Any:
    # TOML booleans are Python ints: `workers = true` must not mean one worker.
    if (isinstance(value, bool) and kind is not bool) or not isinstance(value, kind):
        raise _Bad(where, f"expected {what}, got {_toml_type(value)} {clip(repr(value))}")
    return value


def _toml_type(value: Any) -> str:
    names = {bool: "boolean", int: "integer", float: "float", str: "string", list: "array"}
    return "table" if isinstance(value, dict) else names.get(type(value), type(value).__name__)


def _pool_name(name: str, where: str) -> None:
    try:
        validate_tube(name)
    except ValueError:
        what = "a pool name uses tube-name characters (A-Z a-z 0-9 - + / ; . $ _ ( ))"
        raise _Bad(where, what) from None


def _tubes(table: dict[str, Any], where: str) -> dict[str, Any]:
    if "all" in table:
        return {"all_tubes": _expect(table["all"], bool, join_key(where, "all"), "true or false")}
    if "tubes" not in table:
        return {}
    key = join_key(where, "tubes")
    raw = table["tubes"]
    entries = [raw] if isinstance(raw, str) else _expect(raw, list, key, "a list or a string")
    if not entries:
        raise _Bad(key, "empty: list at least one tube, or \"*\" for every tube")
    tubes: dict[str, None] = {}  # in order; a dict, so that a long list checks in linear time
    for entry in entries:
        _expect(entry, str, key, "a list of strings")
        if entry == "*":
            return {"all_tubes": True}
        _check_tube(entry, key)
        if entry in tubes:
            raise _Bad(key, f"tube {entry!r} listed twice")
        tubes[entry] = None
    return {"tubes": tuple(tubes)}


def _check_tube(entry: str, key: str) -> None:
    try:
        validate_tube_or_glob(entry)
    except ValueError as e:
        raise _Bad(key, str(e)) from None


def _address(raw: Any, key: str) -> dict[str, Any]:
    if raw is None:
        return {}
    items = raw.split(",") if isinstance(raw, str) else _expect(raw, list, key, "a list")
    servers: dict[tuple[str, int], None] = {}
    for item in items:
        try:
            text = _no_nul(_expect(item, str, key, "host:port strings"), key, "the address")
            server = parse_address(text)
        except ValueError as e:
            raise _Bad(key, str(e)) from None
        if server in servers:
            raise _Bad(key, f"{item.strip()!r} listed twice")
        servers[server] = None
    if not servers:
        raise _Bad(key, "empty: give at least one host:port")
    host, port = next(iter(servers))
    return {"host": host, "port": port, "servers": tuple(servers) if len(servers) > 1 else ()}


def _cwd(raw: Any, base: Path, key: str) -> str:
    text = _no_nul(_expect(raw, str, key, "a directory path"), key, "the directory")
    path = base / Path(text).expanduser()
    if not path.is_dir():
        raise _Bad(key, f"{str(path)!r} is not a directory")
    return str(path)


def _env(raw: Any, key: str) -> tuple[tuple[str, str], ...]:
    table = _expect(raw, dict, key, "a table of NAME = \"value\"")
    for name, value in table.items():
        if not _ENV_NAME.fullmatch(name):
            raise _Bad(join_key(key, name), "not an environment variable name")
        _no_nul(_expect(value, str, join_key(key, name), "a string"), join_key(key, name))
    return tuple(table.items())


def _no_nul(text: str, key: str, what: str = "the value") -> str:
    """A NUL would end a path, a variable or an address where the system reads it:
    --check says so, instead of every job or connection failing later."""
    try:
        no_nul((text,), what)
    except ValueError as e:
        raise _Bad(key, str(e)) from None
    return text


@dataclass(frozen=True, slots=True)
class _Served:
    """The tubes a pool serves, for its limits and rates to name: every one, or its names
    (a set: a pool may list hundreds) and globs."""

    all_tubes: bool
    names: frozenset[str]
    globs: tuple[str, ...]

    @classmethod
    def of(cls, all_tubes: bool, tubes: tuple[str, ...]) -> _Served:
        tubes = tubes or ("default",)
        names = frozenset(t for t in tubes if not is_glob(t))
        return cls(all_tubes, names, tuple(t for t in tubes if is_glob(t)))

    def matches(self, tube: str) -> bool:
        return any(fnmatch.fnmatchcase(tube, glob) for glob in self.globs)


def _limits(raw: Any, served: _Served, key: str) -> tuple[tuple[str, int], ...]:
    table = _expect(raw, dict, key, "a table of TUBE = N")
    limits: list[tuple[str, int]] = []
    for tube, value in table.items():
        where = _served_tube(tube, served, join_key(key, tube))
        count = _expect(value, int, where, "a whole number of running jobs")
        try:
            limits.append((tube, check_limit(count)))
        except ValueError as e:
            raise _Bad(where, str(e)) from None
    return tuple(limits)


def _rates(raw: Any, served: _Served, key: str) -> tuple[tuple[str, float, float], ...]:
    table = _expect(raw, dict, key, "a table of TUBE = \"N/s\" or {rate = N, burst = B}")
    rates: list[tuple[str, float, float]] = []
    for tube, value in table.items():
        where = _served_tube(tube, served, join_key(key, tube))
        rates.append((tube, *parse_rate(value, where)))
    return tuple(rates)


def parse_rate(value: Any, where: str = "rate") -> tuple[float, float]:
    """``"5/s"``, ``"30/m:4"``, ``5`` or ``{rate = 5, burst = 10}`` → (starts per second,
    burst): a string is the flag's form (``config.parse_rate``), a number is per second,
    the table names the burst; its rules and default are the flag's."""
    burst: Any = None
    if isinstance(value, dict):
        unknown = set(value) - {"rate", "burst"}
        if unknown:
            raise _Bad(join_key(where, sorted(unknown)[0]), "unknown key (rate, burst)")
        if "rate" not in value:
            raise _Bad(join_key(where, "rate"), "missing")
        value, burst = value["rate"], value.get("burst")
    try:
        if isinstance(value, str):
            per_second, default = parse_rate_text(value)
        else:
            number = _expect(value, (int, float), where, "a rate such as \"5/s\"")
            per_second = check_rate(float(number))
            default = default_burst(per_second)
    except ValueError as e:
        raise _Bad(where, str(e)) from None
    if burst is None:
        return per_second, default
    where = join_key(where, "burst")
    _expect(burst, int, where, "a whole number of starts")
    try:
        return per_second, check_burst(float(burst))
    except ValueError as e:
        raise _Bad(where, str(e)) from None


def _served_tube(tube: str, served: _Served, where: str) -> str:
    if is_glob(tube):
        raise _Bad(where, "a limit or rate names one tube, not a glob")
    _check_tube(tube, where)
    if not (served.all_tubes or tube in served.names or served.matches(tube)):
        raise _Bad(where, f"{tube!r} is not one of the pool's tubes")
    return where


def check_overlaps(configs: tuple[Config, ...]) -> None:
    """_Bad naming the later pool when two pools serve one tube on one server."""
    overlap = first_overlap(configs)
    if overlap is not None:
        later = overlap.later
        raise _Bad(
            join_key(join_key("pools", later.pool), "all" if later.all_tubes else "tubes"),
            f"{overlap.what} is also served by pool {overlap.earlier.pool!r} on the same server",
        )
