"""A streamed chunk written straight to the client's transport (`ChunkedBody`): framed as
uvicorn frames it, and uvicorn's own `send` wherever it would do more than write."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from llmd.proxy.chunked import ChunkedBody


class Transport(asyncio.Transport):
    """Keeps what is written."""

    def __init__(self) -> None:
        super().__init__()
        self.written: list[bytes] = []

    def write(self, data: Any) -> None:
        self.written.append(bytes(data))

    def is_closing(self) -> bool:
        return False


def cycle(transport: Transport, flow: FlowControl) -> RequestResponseCycle:
    """A cycle of a streamed POST, its response not started."""
    scope: Any = {"type": "http", "method": "POST", "http_version": "1.1", "path": "/"}
    return RequestResponseCycle(
        scope=scope,
        transport=transport,
        flow=flow,
        logger=None,  # type: ignore[arg-type]
        access_logger=None,  # type: ignore[arg-type]
        access_log=False,
        default_headers=[],
        message_event=asyncio.Event(),
        expect_100_continue=False,
        keep_alive=True,
        on_response=lambda: None,
    )


async def started() -> tuple[Transport, FlowControl, RequestResponseCycle]:
    transport = Transport()
    flow = FlowControl(transport)
    response = cycle(transport, flow)
    await response.send({"type": "http.response.start", "status": 200, "headers": []})
    transport.written.clear()
    return transport, flow, response


async def test_a_chunk_is_framed_as_uvicorns_send_frames_it() -> None:
    """The bytes written are those uvicorn's send writes for the same chunk."""
    transport, _, response = await started()
    body = ChunkedBody(response)
    assert body.send(b'data: {"n":1}\n\n') is None
    direct = transport.written[:]
    transport.written.clear()
    await response.send(
        {"type": "http.response.body", "body": b'data: {"n":1}\n\n', "more_body": True}
    )
    assert direct == transport.written == [b'f\r\ndata: {"n":1}\n\n\r\n']


async def test_a_backed_up_transport_gets_uvicorns_send_which_waits() -> None:
    """While the client's transport is paused the chunk goes to uvicorn's send, which waits
    for it to drain, then writes it."""
    transport, flow, response = await started()
    flow.pause_writing()
    send = ChunkedBody(response).send(b"abc")
    assert send is not None
    task = asyncio.ensure_future(send)
    await asyncio.sleep(0.01)
    assert not task.done() and transport.written == []
    flow.resume_writing()
    await task
    assert transport.written == [b"3\r\nabc\r\n"]


async def test_a_client_gone_drops_the_chunk() -> None:
    """A disconnected client's chunk is dropped, as uvicorn's send drops it."""
    transport, _, response = await started()
    response.disconnected = True
    assert ChunkedBody(response).send(b"abc") is None
    assert transport.written == []


@pytest.mark.parametrize("headers", [[(b"content-length", b"3")]])
async def test_a_response_not_chunked_goes_to_uvicorns_send(headers: Any) -> None:
    """A response framed by Content-Length is uvicorn's to write."""
    transport = Transport()
    response = cycle(transport, FlowControl(transport))
    await response.send({"type": "http.response.start", "status": 200, "headers": headers})
    transport.written.clear()
    send = ChunkedBody(response).send(b"abc")
    assert send is not None
    await send
    assert transport.written == [b"abc"]
