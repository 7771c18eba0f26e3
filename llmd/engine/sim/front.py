"""What the endpoint modules (pooling, scoring, audio, tokens) need of the HTTP server, as a
protocol, so that they import no server: `SimServer` (server.py) is the one that serves it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from llmd.engine.sim.asgi import Answer, SimRequest
from llmd.engine.sim.core import SimEngine
from llmd.engine.sim.faults import RequestFault
from llmd.engine.sim.tasks import ModelTasks
from llmd.engine.sim.tokenizer import SimTokenizer

if TYPE_CHECKING:  # the pooling requests' module is imported by the pooling routes only
    from llmd.engine.sim.pooling_requests import PromptContext


class Front(Protocol):
    """The server as an endpoint sees it."""

    engine: SimEngine
    tokenizer: SimTokenizer
    tasks: ModelTasks
    model_name: str
    max_model_len: int

    @property
    def prompt_context(self) -> PromptContext:
        """What reading a pooling body needs of the server."""

    def check_model(self, name: object) -> None:
        """Raises vLLM 0.32's 404 when a request's `model` is served under no name."""

    async def admit(
        self, request: SimRequest, body_fault: str, *, generation: bool = False
    ) -> RequestFault | Answer:
        """The request's faults, or the answer a fault gives it at once."""
