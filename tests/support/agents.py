"""The two coding-agent CLIs as the README's "Coding agents" section sets them up: Claude Code
and Codex CLI (installed by scripts/setup-agents.sh into var/npm), run against a base URL with
the README's settings, a home of their own, and every proxy variable pointing at an
`EgressSink`, so that any connection they try to anything but that URL is seen (and refused).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import socket
import subprocess
import threading
import time
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import tomli_w

from tests.support.llmd_process import REPO

NPM_BIN = REPO / "var" / "npm" / "node_modules" / ".bin"
CLAUDE, CODEX = NPM_BIN / "claude", NPM_BIN / "codex"


def ensure_agents() -> None:
    """Install both CLIs if they are missing (scripts/setup-agents.sh: idempotent, npm)."""
    subprocess.run([str(REPO / "scripts" / "setup-agents.sh")], check=True)


def readme_block(heading: str, language: str) -> str:
    """The first ```language block under the README heading `heading` (any level)."""
    text = (REPO / "README.md").read_text()
    start = re.search(rf"^#+ {re.escape(heading)}$", text, re.MULTILINE)
    assert start, f"README has no heading {heading!r}"
    block = re.search(rf"^```{language}\n(.*?)^```$", text[start.end() :], re.MULTILINE | re.DOTALL)
    assert block, f"README's {heading!r} has no {language} block"
    return block.group(1)


def claude_settings() -> dict[str, str]:
    """The variables the README's Claude Code block exports (`export NAME=VALUE`)."""
    settings = {}
    for line in readme_block("Claude Code", "sh").splitlines():
        if line.startswith("export "):
            name, _, value = line.removeprefix("export ").split("#")[0].strip().partition("=")
            settings[name] = value.strip("'\"")
    return settings


def codex_config() -> dict[str, Any]:
    """The README's ~/.codex/config.toml for Codex CLI, parsed."""
    return tomllib.loads(readme_block("Codex CLI", "toml"))


@dataclasses.dataclass(frozen=True)
class AgentRun:
    """One CLI run: its exit status, output and wall time."""

    returncode: int
    stdout: str
    stderr: str
    seconds: float


class EgressSink:
    """A proxy that refuses everything and records the first line of each connection (`CONNECT
    host:443 HTTP/1.1` for HTTPS): where a CLI tried to go besides the URL it was given."""

    def __init__(self) -> None:
        self.attempts: list[str] = []
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.2)
        self.port = self._server.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def proxy_env(self) -> dict[str, str]:
        """Every proxy variable Node, Bun and Rust's reqwest read, at this sink; none for
        127.0.0.1 and localhost, where llmd is."""
        url = f"http://127.0.0.1:{self.port}"
        names = ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY")
        local = "127.0.0.1,localhost"
        env = {n: url for n in names} | {n.lower(): url for n in names}
        return env | {"NO_PROXY": local, "no_proxy": local}

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._server.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(2)
                try:
                    self.attempts.append(conn.recv(512).split(b"\r\n")[0].decode(errors="replace"))
                except OSError:
                    self.attempts.append("(no request line)")


@contextmanager
def egress_sink() -> Iterator[EgressSink]:
    sink = EgressSink()
    try:
        yield sink
    finally:
        sink.close()


def run_claude(
    base_url: str,
    prompt: str,
    workdir: Path,
    sink: EgressSink,
    *,
    settings: dict[str, str] | None = None,
    timeout_s: float = 600,
) -> AgentRun:
    """`claude -p PROMPT` with the README's settings (or `settings`), its base URL `base_url`,
    HOME in `workdir`, nothing of this machine's environment but PATH."""
    env = {**(claude_settings() if settings is None else settings)}
    env["ANTHROPIC_BASE_URL"] = base_url
    return _run([str(CLAUDE), "-p", prompt], env, workdir, sink, timeout_s)


def run_codex(
    base_url: str,
    prompt: str,
    workdir: Path,
    sink: EgressSink,
    *,
    config: dict[str, Any] | None = None,
    skip_git: bool = True,
    timeout_s: float = 600,
) -> AgentRun:
    """`codex exec PROMPT` with the README's config.toml (or `config`), its provider's
    base_url at `base_url`/v1, in a CODEX_HOME of its own, the key in the provider's env_key;
    `--skip-git-repo-check` (the work directory is no git checkout) unless not `skip_git`."""
    config = copy.deepcopy(codex_config() if config is None else config)
    provider = config["model_providers"][config["model_provider"]]
    provider["base_url"] = f"{base_url}/v1"
    codex_home = workdir / "codex-home"
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(tomli_w.dumps(config))
    env = {"CODEX_HOME": str(codex_home), provider["env_key"]: "sk-llmd-test"}
    argv = [str(CODEX), "exec", *(["--skip-git-repo-check"] if skip_git else []), prompt]
    return _run(argv, env, workdir, sink, timeout_s)


def _run(
    argv: list[str], env: dict[str, str], workdir: Path, sink: EgressSink, timeout_s: float
) -> AgentRun:
    home = workdir / "home"
    home.mkdir(parents=True, exist_ok=True)
    full_env = {"PATH": "/usr/bin:/bin", "HOME": str(home), **sink.proxy_env(), **env}
    started = time.monotonic()
    done = subprocess.run(
        argv,
        env=full_env,
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    return AgentRun(done.returncode, done.stdout, done.stderr, time.monotonic() - started)


@dataclasses.dataclass(frozen=True)
class CapturedRequest:
    """One request a `capture_server` received: path with its query, headers (lower-case
    names), the body as sent and parsed."""

    path: str
    headers: dict[str, str]
    raw: bytes

    @property
    def body(self) -> dict[str, Any]:
        parsed: dict[str, Any] = json.loads(self.raw)
        return parsed


class CapturedRequests:
    """What a `capture_server` received, in order."""

    def __init__(self) -> None:
        self.requests: list[CapturedRequest] = []


@contextmanager
def capture_server() -> Iterator[tuple[str, CapturedRequests]]:
    """An HTTP server on 127.0.0.1 that records each POST and answers 400 in Anthropic's shape
    (a CLI then gives up after a few tries); its base URL and the record."""
    captured = CapturedRequests()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("content-length", 0)))
            headers = {k.lower(): v for k, v in self.headers.items()}
            captured.requests.append(CapturedRequest(self.path, headers, raw))
            answer = b'{"type":"error","error":{"type":"invalid_request_error","message":"no"}}'
            self.send_response(400)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", captured
    finally:
        server.shutdown()
        server.server_close()
