"""SIGHUP when the config file has become something else (issue #27, items 3 and 4), with
a real ``cmdstalk --config``: a FIFO, a link to ``/dev/zero``, a file nobody can read, a
link swapped to another release. A refused reload is logged and the running pools keep
serving; SIGTERM afterwards stops the supervisor with exit status 0, so nothing wedged
the loop that acts on signals (before the fix, the FIFO kept it blocked in ``open``)."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.helpers import BeanstalkServer, wait_until
from tests.supervisor.conftest import start_cmdstalk

# However the reload misbehaves, it must not take the machine's memory with it: reading
# /dev/zero without a bound (the bug) meets this limit within seconds.
ADDRESS_SPACE = 2 * 1024**3


def _bounded_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


@contextmanager
def supervisor(config: Path, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``cmdstalk --config config``, its stderr in ``log``; killed in ``finally`` if a
    test failed before its SIGTERM was acted on."""
    with log.open("wb") as sink:
        proc = start_cmdstalk(
            "--config", str(config), stdout=subprocess.DEVNULL, stderr=sink,
            preexec_fn=_bounded_memory,
        )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def stops_on_sigterm(proc: subprocess.Popen[bytes], log: Path) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        status = proc.wait(30)  # generous: the point is that it stops at all
    except subprocess.TimeoutExpired:
        pytest.fail(f"SIGTERM not acted on within 30 s; log:\n{log.read_text()[-2000:]}")
    assert status == 0, log.read_text()[-2000:]


def pool_file(path: Path, server: BeanstalkServer, out: Path, tube: str, extra: str = "") -> None:
    path.write_text(
        f'address = "{server.address}"\nshell = ["/bin/sh", "-c"]\n'
        f'[pools.p]\ntubes = ["{tube}"]\n{extra}'
        f'command = \'cat > {out}/$CMDSTALK_JOB_ID.tmp; mv {out}/$CMDSTALK_JOB_ID.tmp '
        f'{out}/$CMDSTALK_JOB_ID\'\n'
    )


def served(server: BeanstalkServer, tube: str, out: Path, body: str) -> None:
    """A job put now is run by the pool: its payload lands in ``out``."""
    job_id = server.client(use=tube).put(body)
    wait_until(lambda: (out / str(job_id)).exists(), 20, message=f"job {job_id} run")
    assert (out / str(job_id)).read_text() == body


def make_fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def link_dev_zero(path: Path) -> None:
    path.unlink()
    path.symlink_to("/dev/zero")


def unreadable_as_anyone(path: Path) -> None:
    # A regular file whose read fails even for root: the kernel answers EIO at offset 0
    # of a process's memory (nothing is mapped there). "self" is the supervisor itself.
    path.unlink()
    path.symlink_to("/proc/self/mem")


def mode_000(path: Path) -> None:
    path.chmod(0)


HOSTILE = [
    pytest.param(make_fifo, "a FIFO, not a regular file", id="fifo"),
    pytest.param(link_dev_zero, "a character device, not a regular file", id="dev-zero"),
    pytest.param(unreadable_as_anyone, "Input/output error", id="eio"),
    pytest.param(
        mode_000, "Permission denied", id="mode-000",
        marks=pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file whatever its mode"),
    ),
]


@pytest.mark.parametrize(("replace", "reason"), HOSTILE)
def test_a_hostile_reload_is_refused_the_pools_serve_and_sigterm_stops(
    beanstalk: BeanstalkServer, tmp_path: Path, replace: Callable[[Path], None], reason: str
) -> None:
    out, config, log = tmp_path / "out", tmp_path / "pools.toml", tmp_path / "stderr.log"
    out.mkdir()
    pool_file(config, beanstalk, out, "hostile")
    with supervisor(config, log) as proc:
        served(beanstalk, "hostile", out, "before")
        replace(config)
        proc.send_signal(signal.SIGHUP)
        refusal = f"{config}: {reason}"
        wait_until(lambda: refusal in log.read_text(), 20, message=f"{refusal!r} logged")
        (line,) = [x for x in log.read_text().splitlines() if refusal in x]
        assert "ERROR" in line and "Traceback" not in log.read_text()
        served(beanstalk, "hostile", out, "after")  # the running pool kept serving
        assert proc.poll() is None
        stops_on_sigterm(proc, log)


def test_a_link_swapped_to_another_release_reloads_that_release_whole(
    beanstalk: BeanstalkServer, tmp_path: Path
) -> None:
    """The usual deploy: ``pools.toml`` links into a release directory whose ``cwd`` is
    relative; the link moves to the next release and SIGHUP runs that release's pool in
    that release's directory."""
    out, log = tmp_path / "out", tmp_path / "stderr.log"
    out.mkdir()
    for name in ("one", "two"):
        (tmp_path / name / "work").mkdir(parents=True)
        (tmp_path / name / "pools.toml").write_text(
            f'address = "{beanstalk.address}"\nshell = ["/bin/sh", "-c"]\n'
            f'[pools.{name}]\ntubes = ["swap"]\ncwd = "work"\nenv = {{ RELEASE = "{name}" }}\n'
            f'command = \'echo "$RELEASE $(pwd)" > {out}/$CMDSTALK_JOB_ID.tmp; '
            f'mv {out}/$CMDSTALK_JOB_ID.tmp {out}/$CMDSTALK_JOB_ID\'\n'
        )
    link = tmp_path / "pools.toml"
    link.symlink_to(tmp_path / "one" / "pools.toml")
    client = beanstalk.client(use="swap")
    with supervisor(link, log) as proc:
        first = client.put("x")
        wait_until(lambda: (out / str(first)).exists(), 20, message="release one's job")
        assert (out / str(first)).read_text() == f"one {tmp_path / 'one' / 'work'}\n"
        swap = tmp_path / "pools.toml.new"
        swap.symlink_to(tmp_path / "two" / "pools.toml")
        swap.replace(link)  # atomically, as a deploy does
        proc.send_signal(signal.SIGHUP)
        # Pool "one" is retired and "two" started: wait until "two" runs a job.
        def ran_by_two() -> bool:
            job_id = client.put("y")
            done = out / str(job_id)
            wait_until(done.exists, 20, message=f"job {job_id} run")
            return done.read_text().startswith("two ")

        wait_until(ran_by_two, 30, interval=0.2, message="release two serving")
        last = client.put("z")
        wait_until(lambda: (out / str(last)).exists(), 20, message="release two's job")
        assert (out / str(last)).read_text() == f"two {tmp_path / 'two' / 'work'}\n"
        stops_on_sigterm(proc, log)
