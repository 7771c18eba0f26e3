"""What the endpoint modules (pooling, scoring, audio, tokens) need of the HTTP server, as a
protocol, so that they import no server: `SimServer` (server.py) is the one that serves it."""

from __future__ import annotations

from typing import Protocol

from llmd.engine.sim.asgi import Answer, SimRequest
from llmd.engine.sim.core import SimEngine
from llmd.engine.sim.faults import RequestFault
from llmd.engine.sim.pooling_requests import PromptContext
from llmd.engine.sim.tasks import ModelTasks
from llmd.engine.sim.tokenizer import SimTokenizer


class Front(Protocol):
    """The server as an endpoint sees it."""

    engine: SimEngine
    tokenizer: SimTokenizer
    tasks: ModelTasks
    prompt_context: PromptContext
    model_name: str
    max_model_len: int

    def check_model(self, name: object) -> None:
        """Raises vLLM 0.32's 404 when a request's `model` is served under no name."""

    async def admit(
        self, request: SimRequest, body_fault: str, *, generation: bool = False
    ) -> RequestFault | Answer:
        """The request's faults, or the answer a fault gives it at once."""
