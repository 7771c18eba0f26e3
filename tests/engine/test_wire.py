"""The relay's HTTP/1.1 client (llmd/engine/wire.py, its connections in llmd/engine/connection.py)
against real sockets: a connection kept alive and reused, a stale one renewed, a refused connect,
bodies by length, chunks or close, each chunk handed on as it arrives, an answer cut off, a slow
reader pausing the backend, and a closed or cancelled answer closing its connection; a request
lost unanswered sent again only when the backend cannot have taken it (or it is a GET), and
`fetch`'s whole answer in a timeout."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import select
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from llmd.engine.client import EngineClient
from llmd.engine.connection import CHUNKS_HIGH, ConnectFailed, ConnectionLost, Reply
from llmd.engine.wire import Pool
from tests.support.http_requests import read_request, shut_now
from tests.support.waiting import until


class Backend:
    """A small HTTP server on a Unix socket: `connections` it accepted, `requests` it read
    (head and body), and what `answer(request, writer)` writes for each."""

    def __init__(self, answer: Callable[[bytes, asyncio.StreamWriter], Awaitable[bool]]) -> None:
        self.answer = answer
        self.connections: list[asyncio.StreamWriter] = []
        self.requests: list[bytes] = []
        self.closed: list[asyncio.StreamWriter] = []

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections.append(writer)
        try:
            while True:
                request = await read_request(reader)
                self.requests.append(request)
                if not await self.answer(request, writer):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.closed.append(writer)
            writer.close()


@contextlib.asynccontextmanager
async def backend(
    socket: Path, answer: Callable[[bytes, asyncio.StreamWriter], Awaitable[bool]]
) -> AsyncIterator[Backend]:
    served = Backend(answer)
    server = await asyncio.start_unix_server(served.serve, path=str(socket))
    try:
        yield served
    finally:
        await _stop(server, served)


async def _stop(server: asyncio.Server, served: Backend) -> None:
    """Stop the server, its handlers ended first (a handler cancelled at the loop's end
    is logged as an error by asyncio's streams)."""
    server.close()
    for writer in served.connections:
        writer.close()
    await until(lambda: len(served.closed) == len(served.connections), timeout_s=5)
    await server.wait_closed()


async def ok(request: bytes, writer: asyncio.StreamWriter) -> bool:
    """A kept-alive answer by length, echoing the request's body."""
    body = request.split(b"\r\n\r\n", 1)[1]
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    await writer.drain()
    return True


CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"


def in_turn(
    start: bytes, *then: tuple[asyncio.Event, bytes]
) -> Callable[[bytes, asyncio.StreamWriter], Awaitable[bool]]:
    """An answer that writes `start`, then each of `then`'s bytes once its event is set
    (one write each), kept alive."""

    async def answer(request: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(start)
        await writer.drain()
        for gate, data in then:
            await gate.wait()
            writer.write(data)
            await writer.drain()
        return True

    return answer


async def test_requests_in_turn_share_one_kept_alive_connection(tmp_path: Path) -> None:
    """Answers read to their end leave the connection for the next request; the request
    carries the given headers, Host and Content-Length, and its body."""
    async with backend(tmp_path / "e.sock", ok) as served:
        pool = Pool(socket_path=tmp_path / "e.sock")
        for n in range(3):
            answer = await pool.post("/v1/x", b'{"n":%d}' % n, {"x-request-id": f"r{n}"})
            assert answer.status == 200 and answer.headers["content-length"] == "7"
            assert await answer.read() == b'{"n":%d}' % n
        pool.close()
    assert len(served.connections) == 1
    head, body = served.requests[2].split(b"\r\n\r\n")
    assert head.startswith(b"POST /v1/x HTTP/1.1\r\n")
    assert b"x-request-id: r2" in head and b"host: engine" in head.lower()
    assert body == b'{"n":2}'


async def test_a_connection_idle_past_keep_alive_is_closed_not_reused(tmp_path: Path) -> None:
    """Of two kept-alive connections, the one idle past `keepalive_s` is closed when the
    other comes back to the pool, and never sent a request again."""
    async with backend(tmp_path / "e.sock", ok) as served:
        pool = Pool(socket_path=tmp_path / "e.sock", keepalive_s=2.0)
        both = await asyncio.gather(*(pool.post("/", b"{}", {}) for _ in range(2)))
        for answer in both:
            await answer.read()
        assert len(pool.idle) == 2
        pool.idle[0].idle_since -= 10  # as if idle for 10 s
        stale = pool.idle[0]
        await (await pool.post("/", b"{}", {})).read()
        assert pool.idle == [pool.idle[0]] and pool.idle[0] is not stale
        assert await until(lambda: len(served.closed) == 1, timeout_s=5)
        pool.close()
    assert len(served.connections) == 2 and len(served.requests) == 3


async def test_connections_idle_past_keep_alive_are_closed_with_no_next_request(
    tmp_path: Path,
) -> None:
    """Connections a burst opened and gave back are closed once idle past `keepalive_s`,
    without waiting for another request to look at them (an idle daemon holds no engine
    connections, as with aiohttp's connector)."""

    async def overlapping(request: bytes, writer: asyncio.StreamWriter) -> bool:
        await asyncio.sleep(0.05)  # the five requests overlap: five connections
        return await ok(request, writer)

    async with backend(tmp_path / "e.sock", overlapping) as served:
        pool = Pool(socket_path=tmp_path / "e.sock", keepalive_s=0.2)
        for answer in await asyncio.gather(*(pool.post("/", b"{}", {}) for _ in range(5))):
            await answer.read()
        assert len(served.connections) == 5
        assert await until(lambda: len(served.closed) == 5, timeout_s=5)
        assert not pool.idle
        pool.close()


async def test_each_chunk_is_handed_on_as_it_arrives(tmp_path: Path) -> None:
    """A chunked answer's chunks are read one by one, the second sent only after the reader
    had the first (nothing waits to fill a buffer); the connection is kept after the end."""
    second = asyncio.Event()
    chunked = in_turn(CHUNKED + b"5\r\nfirst\r\n", (second, b"6\r\nsecond\r\n0\r\n\r\n"))
    async with backend(tmp_path / "e.sock", chunked) as served:
        pool = Pool(socket_path=tmp_path / "e.sock")
        answer = await pool.post("/", b"{}", {})
        assert await answer.readany() == b"first"
        second.set()
        assert await answer.readany() == b"second"
        assert await answer.readany() == b""
        answer.close()
        second.clear()
        again = await pool.post("/", b"{}", {})
        assert await again.readany() == b"first"
        again.close()  # mid-answer: its connection closes
        second.set()
        assert await until(lambda: len(served.closed) == 1, timeout_s=5)
        pool.close()
    assert len(served.connections) == 1


async def test_the_chunks_of_one_read_reach_the_sink_as_one(tmp_path: Path) -> None:
    """The HTTP chunks one read holds go to `wait`'s sink in one call, in order, before
    the answer's end in that same read; the next read's in the next call."""
    first, more = asyncio.Event(), asyncio.Event()
    chunked = in_turn(
        CHUNKED,
        (first, b"1\r\na\r\n2\r\nbc\r\n3\r\ndef\r\n"),
        (more, b"1\r\ng\r\n1\r\nh\r\n0\r\n\r\n"),
    )
    async with backend(tmp_path / "e.sock", chunked):
        pool = Pool(socket_path=tmp_path / "e.sock")
        answer = await pool.post("/", b"{}", {})
        taken: list[bytes] = []

        def sink(chunk: bytes) -> bool:
            taken.append(chunk)
            more.set()
            return True

        waiting = asyncio.ensure_future(answer.wait(sink))
        first.set()
        await asyncio.wait_for(waiting, timeout=5)  # the answer's end wakes it
        assert taken == [b"abcdef", b"gh"]
        assert await answer.readany() == b""
        pool.close()


async def test_a_body_ended_by_the_close_is_read_to_the_close(tmp_path: Path) -> None:
    """An answer with neither length nor chunks ends when the backend closes; `Connection:
    close` keeps the connection from reuse."""

    async def until_close(request: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nall of it")
        await writer.drain()
        return False

    async with backend(tmp_path / "e.sock", until_close) as served:
        pool = Pool(socket_path=tmp_path / "e.sock")
        for _ in range(2):
            answer = await pool.post("/", b"{}", {})
            assert await answer.read() == b"all of it"
    assert len(served.connections) == 2


@contextlib.asynccontextmanager
async def backend_over(
    over: str, directory: Path, answer: Callable[[bytes, asyncio.StreamWriter], Awaitable[bool]]
) -> AsyncIterator[tuple[Backend, Pool]]:
    """A `Backend` on a Unix socket (`over` "unix") or a TCP port ("tcp"), and a pool on it."""
    served = Backend(answer)
    if over == "unix":
        server = await asyncio.start_unix_server(served.serve, path=str(directory / "e.sock"))
        pool = Pool(socket_path=directory / "e.sock")
    else:
        server = await asyncio.start_server(served.serve, "127.0.0.1", 0)
        pool = Pool(host="127.0.0.1", port=server.sockets[0].getsockname()[1])
    try:
        yield served, pool
    finally:
        pool.close()
        await _stop(server, served)


def _until_readable(pool: Pool) -> None:
    """Wait, the event loop held, until the close reached the pool's idle connection: the
    pool's loop has not seen it."""
    [connection] = pool.idle
    assert connection.transport is not None
    fd = connection.transport.get_extra_info("socket").fileno()
    assert select.select([fd], [], [], 5)[0] == [fd]


@pytest.mark.parametrize("over", ["unix", "tcp"])
async def test_a_kept_alive_connection_closed_as_the_request_goes_out_is_renewed(
    tmp_path: Path, over: str
) -> None:
    """The backend closes the idle kept-alive connection just as the next POST goes out (the
    pool's loop has not seen the close): the request is sent on a new connection and
    answered once (on a Unix socket the write fails; over TCP the end is read before it)."""
    async with backend_over(over, tmp_path, ok) as (served, pool):
        assert await (await pool.post("/", b"{}", {})).read() == b"{}"
        shut_now(served.connections[0])
        _until_readable(pool)
        assert await (await pool.post("/", b'{"n":2}', {})).read() == b'{"n":2}'
        assert len(served.connections) == 2
    assert [request.split(b"\r\n\r\n")[1] for request in served.requests] == [b"{}", b'{"n":2}']


@pytest.mark.parametrize("over", ["unix", "tcp"])
async def test_a_post_read_then_dropped_unanswered_is_not_sent_again(
    tmp_path: Path, over: str
) -> None:
    """The backend reads the whole POST on the kept-alive connection, then closes it without
    an answer (it took the request: a generation whose head comes at its end, then lost its
    connection): ConnectionLost, and the backend had the request once (sent again, it would
    run twice)."""

    async def then_drop(request: bytes, writer: asyncio.StreamWriter) -> bool:
        if len(served.requests) > 1:
            return False  # taken, then closed unanswered
        return await ok(request, writer)

    async with backend_over(over, tmp_path, then_drop) as (served, pool):
        assert await (await pool.post("/", b"{}", {})).read() == b"{}"
        with pytest.raises(ConnectionLost) as lost:
            await pool.post("/", b'{"n":2}', {})
        assert not lost.value.answered and lost.value.sent
        assert await until(lambda: len(served.closed) == 1, timeout_s=5)
    assert len(served.connections) == 1 and len(served.requests) == 2


async def test_a_get_lost_unanswered_on_a_kept_alive_connection_is_sent_once_more(
    tmp_path: Path,
) -> None:
    """A GET (idempotent, RFC 9110 9.2.2) the backend read on the kept-alive connection and
    dropped unanswered is sent once more on a new connection; a GET carries no
    Content-Length."""

    async def drop_second(request: bytes, writer: asyncio.StreamWriter) -> bool:
        if len(served.requests) == 2:
            return False
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        return True

    async with backend_over("unix", tmp_path, drop_second) as (served, pool):
        for _ in range(2):
            assert await (await pool.request("GET", "/health")).read() == b"ok"
    assert len(served.connections) == 2 and len(served.requests) == 3
    assert served.requests[1].startswith(b"GET /health HTTP/1.1\r\n")
    assert b"content-length" not in served.requests[1].lower()


async def test_fetch_reads_the_whole_answer_within_its_timeout(tmp_path: Path) -> None:
    """`fetch` gives the status, headers and whole body, the connection kept for the next
    request; an answer not complete within `timeout_s` is TimeoutError, and its connection
    is closed (the backend sees the close)."""

    async def hang_on_slow(request: bytes, writer: asyncio.StreamWriter) -> bool:
        if request.startswith(b"GET /slow "):
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\npart")
            return True  # the rest never comes
        return await ok(request, writer)

    async with backend_over("unix", tmp_path, hang_on_slow) as (served, pool):
        answer = await pool.fetch("POST", "/x", b"abc", {"x-a": "1"}, timeout_s=5)
        assert (answer.status, answer.body, answer.headers["content-length"]) == (200, b"abc", "3")
        assert answer.text() == "abc" and len(pool.idle) == 1
        with pytest.raises(TimeoutError):
            await pool.fetch("GET", "/slow", timeout_s=0.2)
        assert await until(lambda: len(served.closed) == 1, timeout_s=5)
        assert not pool.idle
    assert len(served.connections) == 1 and b"x-a: 1" in served.requests[0]


async def test_a_refused_connect_is_not_sent_again(tmp_path: Path) -> None:
    """No socket, or a TCP port nobody listens on: ConnectFailed (nothing was sent)."""
    with pytest.raises(ConnectFailed):
        await Pool(socket_path=tmp_path / "none.sock").post("/", b"{}", {})
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    with pytest.raises(ConnectFailed):
        await Pool(host="127.0.0.1", port=port).post("/", b"{}", {})


async def test_a_backend_gone_after_the_request_went_out_is_a_loss(tmp_path: Path) -> None:
    """The kept-alive connection closes unanswered and the new connect is refused (the
    backend stopped listening as it had the request): the loss is raised, not the refusal."""
    socket = tmp_path / "e.sock"
    servers: list[asyncio.Server] = []

    async def then_gone(request: bytes, writer: asyncio.StreamWriter) -> bool:
        if len(served.requests) == 1:
            return await ok(request, writer)
        servers[0].close()  # no more connects
        socket.unlink()
        return False

    served = Backend(then_gone)
    servers.append(await asyncio.start_unix_server(served.serve, path=str(socket)))
    try:
        pool = Pool(socket_path=socket)
        assert await (await pool.post("/", b"{}", {})).read() == b"{}"
        with pytest.raises(ConnectionLost) as lost:
            await pool.post("/", b"{}", {})
        assert not lost.value.answered and len(served.connections) == 1
    finally:
        await _stop(servers[0], served)


@pytest.mark.parametrize(
    "cut",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n",
    ],
    ids=["length", "chunked"],
)
async def test_an_answer_cut_off_mid_body_raises_after_what_came(
    tmp_path: Path, cut: bytes
) -> None:
    """The backend closes before the body's end: what came is read, then ConnectionLost
    (answered: the head had come)."""

    async def cut_off(request: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(cut)
        await writer.drain()
        return False

    async with backend(tmp_path / "e.sock", cut_off):
        answer = await Pool(socket_path=tmp_path / "e.sock").post("/", b"{}", {})
        assert await answer.readany() == b"abc"
        with pytest.raises(ConnectionLost) as lost:
            await answer.readany()
        assert lost.value.answered


async def test_a_slow_reader_pauses_the_backend(tmp_path: Path) -> None:
    """While the reader takes nothing, the backend's socket is not read past `CHUNKS_HIGH`
    (the backend's writes back up); once read, the whole body comes, in order."""
    chunk = b"x" * 4096
    total = 4096 * 1024  # 4 MiB, far above any socket buffer
    writers: list[asyncio.StreamWriter] = []

    async def firehose(request: bytes, writer: asyncio.StreamWriter) -> bool:
        writers.append(writer)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for _ in range(total // len(chunk)):
            writer.write(b"1000\r\n" + chunk + b"\r\n")
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True

    async with backend(tmp_path / "e.sock", firehose):
        pool = Pool(socket_path=tmp_path / "e.sock")
        answer = await pool.post("/", b"{}", {})
        # The backend's writes back up past its transport's high-water mark (64 KiB): its
        # drain waits, as a backend's send waits on a client that reads nothing.
        backed_up = lambda: bool(writers) and writers[0].transport.get_write_buffer_size() > 2**16  # noqa: E731
        assert await until(backed_up, timeout_s=10)
        assert CHUNKS_HIGH <= answer.buffered < CHUNKS_HIGH + 2**18
        assert len(await answer.read()) == total
        pool.close()


async def test_an_answer_that_ends_while_paused_leaves_the_connection_reading(
    tmp_path: Path,
) -> None:
    """A body over `CHUNKS_HIGH` that ends unread (reading paused for its reader): the
    connection, kept alive, reads again for the next request."""
    big = b"y" * (2 * CHUNKS_HIGH)

    async def large(request: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(big) + big)
        await writer.drain()
        return True

    async with backend(tmp_path / "e.sock", large) as served:
        pool = Pool(socket_path=tmp_path / "e.sock")
        first = await pool.post("/", b"{}", {})
        assert await until(lambda: first.ended, timeout_s=5)
        assert await first.read() == big
        second = await asyncio.wait_for(pool.post("/", b"{}", {}), timeout=5)
        assert await second.read() == big
        pool.close()
    assert len(served.connections) == 1


async def test_a_cancelled_reader_closes_the_connection(tmp_path: Path) -> None:
    """A read cancelled mid-answer, its answer closed (as the relay's `finally` does): the
    backend sees its connection close at once (vLLM aborts the sequence then)."""

    async def endless(request: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n")
        await writer.drain()
        return True  # and wait for the next request, or the close

    async with backend(tmp_path / "e.sock", endless) as served:
        pool = Pool(socket_path=tmp_path / "e.sock")
        answer = await pool.post("/", b"{}", {})

        async def relay(answer: Reply) -> None:
            try:
                while await answer.readany():
                    pass
            finally:
                answer.close()

        task = asyncio.create_task(relay(answer))
        assert await until(lambda: not answer.chunks and answer.waiter is not None, 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await until(lambda: len(served.closed) == 1, timeout_s=1)
        assert not pool.idle


def _certificate(directory: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


async def test_an_https_backend_is_reached_over_verified_tls(tmp_path: Path) -> None:
    """An `https` URL: TCP to its host and port, TLS verified against the given CAs (the
    system's by default), the URL's path before the request's; a certificate the CAs do not
    vouch for is a failed connect."""
    cert, key = _certificate(tmp_path)
    served = Backend(ok)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    server = await asyncio.start_server(served.serve, "127.0.0.1", 0, ssl=context)
    port = server.sockets[0].getsockname()[1]
    try:
        client = EngineClient(f"https://localhost:{port}/api")
        pool = client.pool()
        assert pool.tls and pool.port == port and pool.host == "localhost"
        with pytest.raises(ConnectFailed):
            await pool.post(client.request_path("/v1/x"), b"{}", {})
        trusted = Pool(
            host="localhost", port=port, tls=True, ssl_context=ssl.create_default_context()
        )
        assert trusted._ssl is not None
        trusted._ssl.load_verify_locations(cert)
        answer = await trusted.post(client.request_path("/v1/x"), b"{}", {})
        assert await answer.read() == b"{}"
        assert served.requests[0].startswith(b"POST /api/v1/x HTTP/1.1\r\n")
        trusted.close()
    finally:
        await _stop(server, served)


async def test_a_backend_fetch_carries_its_url_path_and_credentials(tmp_path: Path) -> None:
    """`EngineClient.fetch` (the daemon's side calls) sends the URL's path before the
    request's, the URL's `user:password@` as Basic auth (an API key, as Bearer, instead when
    given), and the call's own headers."""
    async with backend_over("tcp", tmp_path, ok) as (served, pool):
        base = f"http://u:p@127.0.0.1:{pool.port}/api"
        for client in (EngineClient(base), EngineClient(base, api_key="k")):
            answer = await client.fetch(
                "POST", "/tokenize", timeout_s=5, body=b"{}", headers={"x-a": "1"}
            )
            assert answer.json() == {}
            await client.close()
    basic, bearer = (request.split(b"\r\n\r\n")[0].lower() for request in served.requests)
    assert basic.startswith(b"post /api/tokenize http/1.1\r\n") and b"x-a: 1" in basic
    assert b"authorization: basic dtpw" in basic  # base64 of "u:p"
    assert b"authorization: bearer k" in bearer and b"basic" not in bearer
