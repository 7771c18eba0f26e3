"""What a simulator start imports: no aiohttp, torch, transformers or vLLM, no uvicorn command
line (click, watchfiles: llmd.console.import_uvicorn), and no routes its model does not serve
(the fast suite starts about 310 simulators; each pays for its imports)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ENTRY_MODULES = ("llmd.engine.sim.__main__", "llmd.engine.sim.app", "llmd.engine.sim.server")
NOT_IMPORTED = (
    "aiohttp",
    "torch",
    "transformers",
    "vllm",
    "click",
    "watchfiles",
)
OTHER_RUNNERS = ("llmd.engine.sim.audio", "llmd.engine.sim.pooling", "llmd.engine.sim.scoring")


def test_simulator_imports_none_of_what_it_does_not_use() -> None:
    """A fresh Python that imports the simulator's entry modules has none of these loaded."""
    script = (
        "import importlib, sys\n"
        f"for name in {ENTRY_MODULES!r}: importlib.import_module(name)\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({NOT_IMPORTED!r})))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"


def test_a_generating_model_imports_no_other_runners_routes(tiny_model: Path) -> None:
    """The routes of pooling, scoring and speech models are not imported for a generating
    model's app."""
    script = (
        "import sys\n"
        "from llmd.engine.sim.app import build_server\n"
        "from llmd.engine.sim.options import parse_options\n"
        f"options = parse_options(['--model', {str(tiny_model)!r}, '--uds', 'unused'])\n"
        "build_server(options).app()\n"
        f"print(sorted(set(sys.modules) & set({OTHER_RUNNERS!r})))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"


LATER = (
    "llmd.engine.sim.messages_api",
    "llmd.engine.sim.responses_api",
    "llmd.engine.sim.pooling_requests",
)


def test_the_messages_and_responses_apis_are_imported_at_their_first_request(
    tiny_model: Path,
) -> None:
    """A generating model's app imports neither API (nor the pooling requests' module) at
    start; a Messages request and a Responses request each import theirs and are answered."""
    script = (
        "import asyncio, sys, httpx\n"
        "from llmd.engine.sim.app import build_server\n"
        "from llmd.engine.sim.options import parse_options\n"
        "argv = ['--model', sys.argv[1], '--uds', 'unused', '--served-model-name', 'tiny']\n"
        "options = parse_options(argv)\n"
        "server = build_server(options)\n"
        "app = server.app()\n"
        f"print(sorted(set(sys.modules) & set({LATER!r})))\n"
        "async def ask():\n"
        "    server.engine.start(None)\n"
        "    transport = httpx.ASGITransport(app=app)\n"
        "    async with httpx.AsyncClient(transport=transport, base_url='http://sim') as client:\n"
        "        chat = {'model': 'tiny', 'messages': [{'role': 'user', 'content': 'x'}]}\n"
        "        counted = await client.post('/v1/messages/count_tokens', json=chat)\n"
        "        reply = await client.post('/v1/responses', json={'model': 'tiny', 'input': 'x',\n"
        "                                                         'max_output_tokens': 4})\n"
        "    await server.engine.close()\n"
        "    print(counted.status_code)\n"
        "    print(reply.status_code)\n"
        "asyncio.run(ask())\n"
        f"print(sorted(set(sys.modules) & set({LATER!r})))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tiny_model)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:4] == [
        "[]",
        "200",
        "200",
        "['llmd.engine.sim.messages_api', 'llmd.engine.sim.responses_api']",
    ]
