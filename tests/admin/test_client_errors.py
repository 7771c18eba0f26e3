"""The admin client's failures in llmd's words, and the exit statuses the client verbs give
for them: no daemon 69 (EX_UNAVAILABLE), a socket this user may not open 77 (EX_NOPERM)."""

from __future__ import annotations

import asyncio
import http.server
import json
import os
import socket
import socketserver
import threading
from pathlib import Path

import pytest

from llmd.admin.client import AdminForbidden, AdminUnreachable, admin_request
from llmd.cli import main
from tests.support.llmd_process import short_tmpdir
from tests.support.users import as_nobody

# Every verb that talks to the daemon, with the arguments it needs.
CLIENT_VERBS = [
    ["status"],
    ["status", "--json"],
    ["drain"],
    ["drain", "--wait"],
    ["resume"],
    ["restart", "--engine", "main"],
    ["reload"],
    ["guard", "on"],
    ["deploy", "r1"],
    ["rollback"],
]


@pytest.fixture
def runtime_dir() -> Path:
    return short_tmpdir("llmd-client-")


def _exit_of(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    code = exited.value.code
    assert isinstance(code, int)
    return code, capsys.readouterr().err


@pytest.mark.parametrize("verb", CLIENT_VERBS, ids=" ".join)
def test_a_verb_without_a_daemon_says_what_to_do_and_exits_69(
    verb: list[str], runtime_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No daemon on the runtime directory: one line naming the socket and the next step, exit
    69; nothing of aiohttp's wording, no traceback."""
    code, err = _exit_of([*verb, "--runtime-dir", str(runtime_dir)], capsys)
    socket_path = runtime_dir / "admin.sock"
    assert code == 69
    assert err == (
        f"llmd: no llmd answers on {socket_path}: is it running? (systemctl status llmd), "
        "or pass --runtime-dir\n"
    )


def test_a_socket_nobody_listens_on_is_no_daemon(
    runtime_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The socket a killed llmd left behind (nobody listens): the same words and 69."""
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(runtime_dir / "admin.sock"))
    dead.close()
    code, err = _exit_of(["status", "--runtime-dir", str(runtime_dir)], capsys)
    assert code == 69 and err.startswith("llmd: no llmd answers on ")


def test_a_socket_that_answers_nothing_in_time_says_so(runtime_dir: Path) -> None:
    """A daemon that takes the connection and never answers: the call and the time waited."""
    path = runtime_dir / "admin.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as mute:
        mute.bind(str(path))
        mute.listen()
        with pytest.raises(AdminUnreachable) as caught:
            asyncio.run(admin_request(path, "GET", "/status", timeout_s=0.3))
    assert str(caught.value) == (
        f"llmd on {path} did not answer GET /status within 0.3 s: it may be busy or stuck; "
        "try again, or see systemctl status llmd"
    )


def test_a_change_that_times_out_may_still_take_effect(runtime_dir: Path) -> None:
    """A POST not answered in time (a stopped llmd that goes on acts on it later): the message
    says the request may still take effect and to look before trying again."""
    path = runtime_dir / "admin.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as mute:
        mute.bind(str(path))
        mute.listen()
        with pytest.raises(AdminUnreachable) as caught:
            asyncio.run(admin_request(path, "POST", "/drain", {}, timeout_s=0.3))
    assert str(caught.value) == (
        f"llmd on {path} did not answer POST /drain within 0.3 s: it may be busy or stuck; "
        "the request may still take effect: see `llmd status` before trying again, or see "
        "systemctl status llmd"
    )


def test_a_connection_closed_mid_call_says_llmd_may_have_stopped(runtime_dir: Path) -> None:
    """A daemon that closes the connection before answering (it died during the call)."""
    path = runtime_dir / "admin.sock"

    async def call() -> None:
        async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            writer.close()

        server = await asyncio.start_unix_server(hang_up, path=str(path))
        async with server:
            await admin_request(path, "POST", "/drain", {}, timeout_s=10)

    with pytest.raises(AdminUnreachable) as caught:
        asyncio.run(call())
    assert str(caught.value) == (
        f"the connection to llmd on {path} broke during POST /drain: llmd may have stopped; "
        "see systemctl status llmd"
    )


def test_a_socket_this_user_may_not_open_exits_77(runtime_dir: Path) -> None:
    """The admin socket is there, but its directory denies this user: one line saying to run
    as root or as a member of the socket's group, exit 77 (EX_NOPERM)."""
    path = runtime_dir / "admin.sock"
    with pytest.raises(SystemExit) as absent:  # imports what the verb needs (`as_nobody`)
        main(["status", "--runtime-dir", str(runtime_dir)])
    assert absent.value.code == 69
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as daemon:
        daemon.bind(str(path))
        daemon.listen()
        runtime_dir.chmod(0o700 if os.geteuid() == 0 else 0o000)

        def status() -> str:
            try:
                asyncio.run(admin_request(path, "GET", "/status", timeout_s=5))
            except AdminForbidden as exc:
                return f"forbidden: {exc}"
            return "answered"

        def verb() -> str:
            try:
                main(["status", "--runtime-dir", str(runtime_dir)])
            except SystemExit as exc:
                return str(exc.code)
            return "no exit"

        message = as_nobody(status)
        code = as_nobody(verb)
        runtime_dir.chmod(0o700)
    assert message.startswith(f"forbidden: this user may not open {path} (permission denied): ")
    assert "run as root or as a member of its group (" in message
    assert code == "77"


class _StoppingDaemon(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """An admin socket that takes a drain, answers one status with a request in flight, and
    then goes away (llmd stopping)."""

    daemon_threads = True


class _Answer(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self._json({"in_flight": 1, "queued": 0, "draining": True})

    def do_GET(self) -> None:
        self._json({"in_flight": 1, "queued": 0, "draining": True})
        assert isinstance(self.server, _StoppingDaemon)
        threading.Thread(target=self.server.shutdown).start()
        os.unlink(self.server.server_address)  # type: ignore[arg-type]

    def _json(self, payload: dict[str, object]) -> None:
        body = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass

    def address_string(self) -> str:
        return "llmd"


def test_drain_wait_says_llmd_stopped_when_it_goes_away_meanwhile(
    runtime_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`llmd drain --wait` while llmd stops (its socket goes away between two looks): one line
    saying llmd stopped during the drain, exit 69, not 'is it running?'."""
    server = _StoppingDaemon(str(runtime_dir / "admin.sock"), _Answer)
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    try:
        code, err = _exit_of(["drain", "--wait", "--runtime-dir", str(runtime_dir)], capsys)
    finally:
        server.shutdown()
        server.server_close()
    assert code == 69
    assert err == "llmd: llmd stopped during the drain; see systemctl status llmd\n"
