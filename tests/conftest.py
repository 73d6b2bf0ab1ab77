"""Fixtures shared by every test: real servers on free ports, polled for readiness."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator

import pytest

from tests.helpers import (
    BeanstalkdNotFound,
    BeanstalkServer,
    beanstalkd_path,
    running_beanstalkd,
)

# The same test runs against the real beanstalkd and the bundled server, so every
# behaviour is checked against the reference. The bundled one joins once it exists.
_BUNDLED = importlib.util.find_spec("cmdstalk_py.server.embedded") is not None
SERVER_KINDS = ["beanstalkd", *(["bundled"] if _BUNDLED else [])]


def _needs_spark(item: pytest.Item) -> bool:
    return bool(item.get_closest_marker("spark")) or "spark" in getattr(item, "fixturenames", ())


# tryfirst: xdist reads the groups in its own hook, which must see ours.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist, keep every Spark test on one worker (``--dist loadgroup``).

    The session fixture starts a JVM per worker that asks for it; one is enough, and two
    would not fit beside the rest of the suite on a small machine. The group goes first, so
    that its worker starts on the longest unit while the others share everything else.
    """
    for item in items:
        if _needs_spark(item):
            item.add_marker(pytest.mark.xdist_group("spark"))
    items.sort(key=lambda item: not _needs_spark(item))  # stable: the rest keeps its order


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    """A test (or fixture) that starts the real beanstalkd where there is none is skipped
    with the reason, as README promises, whichever helper it used to start it."""
    try:
        yield
    except BeanstalkdNotFound as exc:
        pytest.skip(str(exc))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    try:
        yield
    except BeanstalkdNotFound as exc:
        pytest.skip(str(exc))


@pytest.fixture
def real_beanstalkd() -> Iterator[BeanstalkServer]:
    """The Debian beanstalkd binary on 127.0.0.1 and a free port."""
    if beanstalkd_path() is None:
        pytest.skip(str(BeanstalkdNotFound()))
    with running_beanstalkd() as server:
        yield server


@pytest.fixture
def bundled_server() -> Iterator[BeanstalkServer]:
    """The bundled server (EmbeddedServer) on 127.0.0.1 and a free port."""
    from cmdstalk_py.server.embedded import EmbeddedServer  # type: ignore[import-not-found,unused-ignore]

    with EmbeddedServer(host="127.0.0.1", port=0) as srv:
        host, port = srv.address
        server = BeanstalkServer("bundled", host, port)
        try:
            yield server
        finally:
            server.close_clients()


@pytest.fixture(params=SERVER_KINDS)
def beanstalk(request: pytest.FixtureRequest) -> BeanstalkServer:
    """Each server kind in turn: the real beanstalkd, then the bundled server."""
    if request.param == "beanstalkd":
        return request.getfixturevalue("real_beanstalkd")  # type: ignore[no-any-return]
    return request.getfixturevalue("bundled_server")  # type: ignore[no-any-return]
