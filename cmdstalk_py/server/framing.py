"""Framing and pipelining: turning a connection's input bytes into commands and replies.

Follows 1.12 exactly (docs §1): a line ends at the first ``\\r`` if ``\\n`` follows it,
within a 224-byte window; a full window without one is thrown away and the input
discarded up to the next CRLF (BAD_FORMAT). A ``put`` line is followed by its body; a
JOB_TOO_BIG body is swallowed before the reply. This is the hot path of the server: one
call per read, locals instead of attribute lookups.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from cmdstalk_py.server import commands
from cmdstalk_py.server import protocol as p

if TYPE_CHECKING:
    from cmdstalk_py.server.conn import Connection

CMD = 0  # reading a command line
BODY = 1  # reading a put body
SKIP = 2  # throwing away a JOB_TOO_BIG body
ENDLINE = 3  # throwing away a too-long line up to its CRLF

_WINDOW = p.LINE_LIMIT
#: Flush replies mid-batch once this many bytes are pending, to notice a slow reader.
FLUSH_AT = 1 << 18

_Put = p.Put
_Rejected = p.Rejected
_Quit = p.Quit
_parse = p.parse_command
_clock = time.monotonic


def process(conn: Connection, out: list[bytes], data: bytes) -> None:
    """Run the commands in ``data`` (after ``out``, replies already due) for ``conn``.

    Complete commands are executed and answered in order, with one write for the batch;
    an incomplete line or body is kept in ``conn.parts`` for the next read. Stops at a
    blocked reserve (the rest waits) and at ``quit``.
    """
    engine = conn.engine
    session = conn.session
    n = len(data)
    pos = 0
    mode = conn.mode
    if mode == BODY:
        put = conn.put
        assert put is not None
        need = conn.need
        if n < need:
            conn.keep_input(data, 0)
            return
        out.append(commands.put_body(engine, session, put, data[:need], _clock()))
        pos = need
        mode = conn.mode = CMD
    out_size = 0
    max_job_size = engine.max_job_size
    execute = commands.execute
    # Puts of one batch share one clock reading: their jobs then share one float object
    # for their creation time, which is 24 bytes per job saved on pipelined fills.
    put_now = _clock()
    while pos < n:
        if mode == CMD:
            end = pos + _WINDOW
            if end > n:
                end = n
            i = data.find(b"\r", pos, end - 1)
            if i < 0 or data[i + 1] != 10:
                if end - pos < _WINDOW:
                    break
                # A full window without a line end: drop it, then skip to CRLF.
                pos = end
                mode = conn.mode = ENDLINE
                continue
            cmd = _parse(data[pos:i], max_job_size)
            pos = i + 2
            kind = type(cmd)
            if kind is _Put:
                engine.begin_put(session)
                need = cmd.size + 2  # type: ignore[union-attr]
                if n - pos < need:
                    conn.put = cmd  # type: ignore[assignment]
                    conn.need = need
                    mode = conn.mode = BODY
                    break
                reply = commands.put_body(engine, session, cmd, data[pos : pos + need], put_now)  # type: ignore[arg-type]
                pos += need
            elif kind is _Rejected:
                reply = execute(engine, session, cmd, 0.0)  # type: ignore[assignment]
                skip = cmd.skip  # type: ignore[union-attr]
                if skip:
                    if n - pos < skip:
                        conn.need = skip - (n - pos)
                        conn.skip_reply = reply
                        pos = n
                        mode = conn.mode = SKIP
                        break
                    pos += skip
            elif kind is _Quit:
                conn.flush(out)
                conn.close_when_done()
                return
            else:
                # The clock is read per command, like 1.12: times in replies must not lag.
                r = execute(engine, session, cmd, _clock())
                if r is None:
                    if not conn.eof:
                        conn.blocked = True
                        break
                    r = commands.abort_wait(engine, session) or p.TIMED_OUT
                reply = r
            out.append(reply)
            out_size += len(reply)
            if out_size > FLUSH_AT:
                conn.flush(out)
                out = []
                out_size = 0
                if conn.write_paused:
                    break
        else:  # ENDLINE
            end = pos + _WINDOW
            if end > n:
                end = n
            i = data.find(b"\r", pos, end - 1)
            if i < 0 or data[i + 1] != 10:
                if end - pos < _WINDOW:
                    break
                pos = end
                continue
            pos = i + 2
            out.append(p.BAD_FORMAT)
            mode = conn.mode = CMD
    if out:
        reply = out[0] if len(out) == 1 else b"".join(out)
        if conn.out or conn.hold or conn.broken:
            conn.send(reply)
        else:
            # _write's common case, inline: the kernel takes the whole reply.
            try:
                sent = conn.sock.send(reply)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError:
                conn.send_failed()
                sent = len(reply)
            if sent < len(reply):
                conn.queue_rest(reply[sent:])
    if pos < n:
        conn.keep_input(data, pos)
    if conn.eof and not conn.blocked:
        conn.finish_eof()
