"""The admin client: every answer becomes the decoded JSON or an AdminRefused with a message."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from llmd.admin.client import AdminRefused, admin_request
from tests.support.llmd_process import short_tmpdir


@pytest.fixture
async def plain_500() -> AsyncIterator[Path]:
    """A Unix socket whose server answers every request 500 in plain text."""

    async def answer(request: web.Request) -> web.Response:
        return web.Response(status=500, text="Internal Server Error")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    socket = short_tmpdir("llmd-client-") / "admin.sock"
    site = web.UnixSite(runner, str(socket))
    await site.start()
    try:
        yield socket
    finally:
        await runner.cleanup()


async def test_an_answer_that_is_not_json_is_refused_with_its_status(plain_500: Path) -> None:
    """A plain-text 500 (not llmd's JSON shape) is AdminRefused naming the route, the status and
    the text, not aiohttp's ContentTypeError (which the CLI printed as a traceback)."""
    with pytest.raises(AdminRefused, match=r"/reload with HTTP 500: 'Internal Server Error'"):
        await admin_request(plain_500, "POST", "/reload")
