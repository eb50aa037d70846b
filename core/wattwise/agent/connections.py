"""What one client may cost the agent: connections per user, a deadline per connection, a bounded log.

Anyone in the socket's group can connect. Without limits, one user's flood of half-sent requests held
every file descriptor of the agent (root's `wattwise agent status` got no answer) and wrote a traceback
per connection into the log. So:

- the agent accepts connections itself (`Listener`), fairly per uid (the kernel's, SO_PEERCRED): root's
  first, then one of each user's in turn; each uid may hold at most `MAX_CONNECTIONS_PER_UID`
  connections at once, and all users other than root together `MAX_CONNECTIONS`; a connection over
  either, or one whose client closed it unsent, is closed at accept, unread (root's own count is
  separate, so a flood never locks root out); each admitted connection's peer is pinned then (`Peer`);
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
from typing import Any, TypeVar

from wattwise.agent.processes import Peer, identify_peer

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Connections one user (uid) may hold open at once; root's are counted apart, with the same limit.
MAX_CONNECTIONS_PER_UID = 32
#: Connections all users other than root may hold open together.
MAX_CONNECTIONS = 256
#: Seconds a connection may stay open, header, body and answer included.
CONNECTION_DEADLINE_S = 10.0
#: Connections taken from the kernel's queue in one pass of the accept loop.
ACCEPT_BATCH = 1024
#: Seconds the accept loop pauses when the agent is out of file descriptors.
ACCEPT_PAUSE_S = 0.1
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
    """Counts open connections per uid, and knows the peer (`Peer`, pinned at accept) of each one."""

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
        #: Connections refused at accept (over a limit), and those dropped there (closed before they sent).
        self.refused = 0
        self.dropped = 0
        self._peers: dict[asyncio.BaseTransport, Peer] = {}
        self._warned: set[int] = set()

    def others(self) -> int:
        """Connections open now from users other than root."""
        return sum(n for uid, n in self.open.items() if uid != 0)

    def admit(self, uid: int) -> bool:
        """Count a new connection from `uid`; False (nothing counted) when it is over a limit."""
        count = self.open.get(uid, 0)
        if count >= self.per_uid or (uid != 0 and self.others() >= self.total):
            self.refused += 1
            if uid not in self._warned:  # once until its connections fall below the limit again
                self._warned.add(uid)
                log.warning(
                    "wattwise agent: uid %d has %d connections open (at most %d per user, %d for all "
                    "users); closing its new ones at accept until some end",
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
        if count < self.per_uid // 2:
            self._warned.discard(uid)

    def peer_of(self, transport: asyncio.BaseTransport | None) -> Peer | None:
        """The peer pinned when `transport`'s connection was accepted; None when it is not one of these."""
        return self._peers.get(transport) if transport is not None else None


def fair_order(batch: list[tuple[int, T]]) -> list[tuple[int, T]]:
    """The connections of one accept pass in the order they are admitted.

    Root's first, then one of each user's in turn (users in the order their first connection came), so
    that one user's many come last.
    """
    queues: dict[int, list[T]] = {}
    for uid, item in batch:
        queues.setdefault(uid, []).append(item)
    ordered = sorted(queues.items(), key=lambda entry: entry[0] != 0)  # stable: the others as they came
    out: list[tuple[int, T]] = []
    depth = 0
    while len(out) < len(batch):
        out.extend((uid, items[depth]) for uid, items in ordered if depth < len(items))
        depth += 1
    return out


class Listener:
    """Accepts the agent's connections itself: fairly per uid, the excess refused at accept.

    asyncio's own server hands every connection the kernel queued to the HTTP server in arrival order,
    so one user connecting and closing in a loop kept root's `wattwise agent status` (and the epilog)
    waiting behind thousands of hers. Here each pass takes what the kernel queued (up to `ACCEPT_BATCH`),
    closes at once, unread, a connection whose client has already gone without sending anything and one
    over its user's limits (`ConnectionLimits`), and admits the rest root's first, then one per user in
    turn. Each admitted connection's peer is pinned then (`identify`: SO_PEERCRED, pidfd, start time).
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        make_protocol: Callable[[], asyncio.Protocol],
        limits: ConnectionLimits,
        identify: Callable[[socket.socket], Peer] = identify_peer,
    ) -> None:
        """Serve `make_protocol`'s protocols on the listening `sock`, within `limits`."""
        self._loop, self._sock, self._make_protocol = loop, sock, make_protocol
        self.limits, self._identify = limits, identify
        self._sock.setblocking(False)
        self._tasks: set[asyncio.Task[None]] = set()
        self._pause: asyncio.TimerHandle | None = None

    def start(self) -> None:
        """Start accepting."""
        self._loop.add_reader(self._sock.fileno(), self._accept)

    def close(self) -> None:
        """Stop accepting and close the listening socket (open connections are the HTTP server's to end)."""
        if self._pause is not None:
            self._pause.cancel()
        with contextlib.suppress(ValueError, OSError):
            self._loop.remove_reader(self._sock.fileno())
        self._sock.close()
        for task in self._tasks:  # connections accepted but not handed to the server yet
            task.cancel()

    def _accept(self) -> None:
        batch: list[tuple[int, socket.socket]] = []
        for _ in range(ACCEPT_BATCH):
            try:
                conn, _ = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                break
            except OSError as err:  # out of file descriptors: wait for some to close instead of spinning
                log.error("wattwise agent: cannot accept connections (%s); trying again shortly", err.strerror)
                self._loop.remove_reader(self._sock.fileno())
                self._pause = self._loop.call_later(ACCEPT_PAUSE_S, self.start)
                break
            uid = peer_uid(conn)
            if uid is None or _gone_unsent(conn):
                self.limits.dropped += 1
                conn.close()
                continue
            batch.append((uid, conn))
        for uid, conn in fair_order(batch):
            if not self.limits.admit(uid):
                conn.close()
                continue
            task = self._loop.create_task(self._serve(uid, conn))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _serve(self, uid: int, conn: socket.socket) -> None:
        try:
            peer = self._identify(conn)
        except OSError:
            self.limits.leave(uid)
            conn.close()
            return
        try:
            await self._loop.connect_accepted_socket(
                lambda: _Limited(self.limits, self._make_protocol(), uid, peer), conn
            )
        except OSError:
            conn.close()  # the protocol never started: _Limited counted nothing
            self.limits.leave(uid)
            peer.close()


def _gone_unsent(conn: socket.socket) -> bool:
    """Whether the client of `conn` closed it before sending a byte: nothing to read, nothing to answer."""
    try:
        return conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        return True


class _Limited(asyncio.Protocol):
    """The server's protocol for one admitted connection: its peer known, cut at the deadline."""

    def __init__(self, limits: ConnectionLimits, inner: asyncio.Protocol, uid: int, peer: Peer) -> None:
        self._limits, self._inner, self._uid, self._peer = limits, inner, uid, peer
        self._timer: asyncio.TimerHandle | None = None
        self._transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)  # a stream server's connection
        self._transport = transport
        self._limits._peers[transport] = self._peer
        self._timer = self._limits.loop.call_later(self._limits.deadline_s, transport.abort)
        self._inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._transport is None:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._limits._peers.pop(self._transport, None)
        self._transport = None
        self._peer.close()
        self._limits.leave(self._uid)
        self._inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._transport is not None:
            self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._transport is not None else None

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()


#: A share's window: when it began, the uses it let through, and those it turned away since the last one let through.
ShareWindow = tuple[float, int, int]


def share_window(last: ShareWindow | None, now: float, window_s: float) -> ShareWindow:
    """A key's share at `now`: `last` (None: its first use), or a new window once `window_s` has passed.

    A new window lets through afresh; what was turned away is still counted, until a use is let through.
    """
    start, passed, dropped = last if last is not None else (now, 0, 0)
    return (now, 0, dropped) if now - start >= window_s else (start, passed, dropped)


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
        self._seen: dict[tuple[str, str], ShareWindow] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        """Let `record` through (without its traceback) unless its message passed `burst` times lately."""
        key = (record.name, str(record.msg))
        start, passed, dropped = share_window(self._seen.get(key), self.clock(), self.window_s)
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
