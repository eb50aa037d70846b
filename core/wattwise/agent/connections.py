"""What one client may cost the agent: connections per user, a deadline per connection, a bounded log.

Anyone in the socket's group can connect. Without limits, one user's flood of half-sent requests held
every file descriptor of the agent (root's `wattwise agent status` got no answer) and wrote a traceback
per connection into the log. So:

- each uid (the kernel's, SO_PEERCRED) may hold at most `MAX_CONNECTIONS_PER_UID` connections at once,
  and all users other than root together `MAX_CONNECTIONS`; a connection over either is closed at once,
  unread (root's own count is separate, so a flood never locks root out);
- a connection is closed `CONNECTION_DEADLINE_S` after it opened, whether its header, its body or
  nothing at all arrived (a request takes milliseconds; clients open one connection per request);
- the agent raises its own open-file limit to the hard limit (at most `WANTED_OPEN_FILES`);
- `QuietLog` keeps the log bounded: at most `LOG_BURST` lines per message per minute, the rest counted
  and reported once, and one line instead of a traceback for errors a client caused.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import socket
import struct
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

#: Connections one user (uid) may hold open at once; root's are counted apart, with the same limit.
MAX_CONNECTIONS_PER_UID = 32
#: Connections all users other than root may hold open together.
MAX_CONNECTIONS = 256
#: Seconds a connection may stay open, header, body and answer included.
CONNECTION_DEADLINE_S = 10.0
#: The open-file limit the agent asks for (the hard limit caps it).
WANTED_OPEN_FILES = 4096
#: Lines one message may write to the log per `LOG_WINDOW_S`; later ones are counted, then summed up.
LOG_BURST = 5
LOG_WINDOW_S = 60.0


def peer_uid(sock: Any) -> int | None:
    """The uid of the process at the other end of a Unix socket (SO_PEERCRED); None when unknown."""
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except (OSError, AttributeError):
        return None
    return int(struct.unpack("3i", raw)[1])


def raise_open_file_limit(wanted: int = WANTED_OPEN_FILES) -> int:
    """Raise this process's soft open-file limit towards `wanted` (never past the hard limit).

    Returns:
        The soft limit now.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if target > soft:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
    return soft


class ConnectionLimits:
    """Counts open connections per uid and wraps each accepted connection's protocol with the limits."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        *,
        per_uid: int = MAX_CONNECTIONS_PER_UID,
        total: int = MAX_CONNECTIONS,
        deadline_s: float = CONNECTION_DEADLINE_S,
    ) -> None:
        """Limits for one listening socket.

        Args:
            loop: the event loop serving it.
            per_uid: connections one uid may hold at once.
            total: connections all non-root users may hold together.
            deadline_s: seconds before any connection is closed.
        """
        self.loop = loop
        self.per_uid, self.total, self.deadline_s = per_uid, total, deadline_s
        self.open: dict[int, int] = {}
        self.refused = 0

    def factory(self, make_protocol: Callable[[], asyncio.Protocol]) -> Callable[[], asyncio.Protocol]:
        """A protocol factory for `loop.create_unix_server` that applies the limits to `make_protocol`'s."""
        return lambda: _Limited(self, make_protocol())

    def others(self) -> int:
        """Connections open now from users other than root."""
        return sum(n for uid, n in self.open.items() if uid != 0)

    def admit(self, uid: int) -> bool:
        """Count a new connection from `uid`; False (nothing counted) when it is over a limit."""
        count = self.open.get(uid, 0)
        if count >= self.per_uid or (uid != 0 and self.others() >= self.total):
            self.refused += 1
            log.warning(
                "wattwise agent: uid %d has %d connections open (at most %d per user, %d for all "
                "users); closing its new ones until some end",
                uid,
                count,
                self.per_uid,
                self.total,
            )
            return False
        self.open[uid] = count + 1
        return True

    def leave(self, uid: int) -> None:
        """A connection of `uid` ended."""
        count = self.open.get(uid, 0) - 1
        if count > 0:
            self.open[uid] = count
        else:
            self.open.pop(uid, None)


class _Limited(asyncio.Protocol):
    """The server's protocol for one connection, admitted by uid and cut at the deadline."""

    def __init__(self, limits: ConnectionLimits, inner: asyncio.Protocol) -> None:
        self._limits, self._inner = limits, inner
        self._uid: int | None = None
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)  # a stream server's connection
        uid = peer_uid(transport.get_extra_info("socket"))
        if uid is None or not self._limits.admit(uid):
            transport.abort()  # never handed to the server: nothing read, nothing logged per connection
            return
        self._uid = uid
        self._timer = self._limits.loop.call_later(self._limits.deadline_s, transport.abort)
        self._inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._uid is None:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._limits.leave(self._uid)
        self._uid = None
        self._inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._uid is not None:
            self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._uid is not None else None

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()


class QuietLog(logging.Filter):
    """A log filter that bounds what clients can make the agent write.

    Per message (its format string and logger), at most `burst` records pass per `window_s`; the records
    dropped are counted and the next record that passes says how many. A record passes without its
    traceback: the exception's type and text are appended to its one line instead.
    """

    def __init__(
        self, burst: int = LOG_BURST, window_s: float = LOG_WINDOW_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        """A filter allowing `burst` records of one message per `window_s` seconds of `clock`."""
        super().__init__()
        self.burst, self.window_s, self.clock = burst, window_s, clock
        self._seen: dict[tuple[str, str], tuple[float, int, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        """Let `record` through (without its traceback) unless its message passed `burst` times lately."""
        key = (record.name, str(record.msg))
        now = self.clock()
        start, passed, dropped = self._seen.get(key, (now, 0, 0))
        if now - start >= self.window_s:
            start, passed = now, 0
        if passed >= self.burst:
            self._seen[key] = (start, passed, dropped + 1)
            return False
        self._seen[key] = (start, passed + 1, 0)
        if len(self._seen) > 10_000:  # many distinct messages: forget the oldest windows
            self._seen = dict(list(self._seen.items())[-1_000:])
        if record.exc_info:
            err = record.exc_info[1]
            if err is not None:
                record.msg = f"{record.getMessage()} ({type(err).__name__}: {err})"
                record.args = None
            record.exc_info = None
            record.exc_text = None
        record.stack_info = None
        if dropped:
            record.msg = f"{record.getMessage()} [{dropped} more like it in the last {self.window_s:g} s not logged]"
            record.args = None
        return True


def quiet_client_logs() -> QuietLog:
    """Attach one `QuietLog` to the root logger's handlers (the agent's stderr), where every record ends.

    A logger's own filter sees only the records made on that very logger, not its children's (aiohttp's
    `aiohttp.server`, asyncio's), so the filter sits on the handlers.

    Returns:
        The filter.
    """
    quiet = QuietLog()
    for handler in logging.getLogger().handlers:
        handler.addFilter(quiet)
    return quiet
