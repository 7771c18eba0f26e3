"""/tokenize and /detokenize, served by every model (vLLM 0.32's serve/tokenize/): no context
check, the request's `model` checked against the served names (404 otherwise)."""

from __future__ import annotations

from starlette.responses import Response

from llmd.engine.sim.asgi import Routes, SimRequest
from llmd.engine.sim.errors import SimHTTPError, validation_error
from llmd.engine.sim.front import Front
from llmd.engine.sim.requests import parse_json_object, parse_tokenize
from llmd.engine.sim.responses import dumps, json_response

_MAX_ID = 2**63 - 1  # DetokenizeRequest.tokens: int, ge=0, le=2**63 - 1


class TokenRoutes:
    """The tokenizer's routes over `server`'s tokenizer."""

    def __init__(self, server: Front) -> None:
        self.server = server

    def add_to(self, router: Routes) -> None:
        router.add_post("/tokenize", self.tokenize)
        router.add_post("/detokenize", self.detokenize)

    async def tokenize(self, request: SimRequest) -> Response:
        """`{"count", "max_model_len", "tokens", "token_strs"}` (token_strs only with
        `return_token_strs`, else null)."""
        server = self.server
        try:
            body = parse_json_object(await request.body())
            server.check_model(body.get("model"))
            ids = parse_tokenize(body, server.tokenizer)
        except SimHTTPError as error:
            return error.response()
        strs = server.tokenizer.token_strs(ids) if body.get("return_token_strs") else None
        answer = {
            "count": len(ids),
            "max_model_len": server.max_model_len,
            "tokens": ids,
            "token_strs": strs,
        }
        return json_response(dumps(answer))

    async def detokenize(self, request: SimRequest) -> Response:
        """`{"prompt": text}`: the ids decoded with special tokens kept (`tokenizer.decode`'s
        defaults); an id past the vocabulary decodes to nothing, a negative one is a 400."""
        server = self.server
        try:
            body = parse_json_object(await request.body())
            server.check_model(body.get("model"))
            tokens = body.get("tokens")
            if "tokens" not in body:
                raise validation_error("missing", "body.tokens", "Field required", body)
            if not isinstance(tokens, list):
                raise validation_error(
                    "list_type", "body.tokens", "Input should be a valid list", tokens
                )
            for index, token in enumerate(tokens):
                _check_id(index, token)
        except SimHTTPError as error:
            return error.response()
        return json_response(dumps({"prompt": server.tokenizer.decode_all(tokens)}))


def _check_id(index: int, token: object) -> None:
    loc = f"body.tokens.{index}"
    if not isinstance(token, int) or isinstance(token, bool):
        raise validation_error(
            "int_parsing",
            loc,
            "Input should be a valid integer, unable to parse string as an integer"
            if isinstance(token, str)
            else "Input should be a valid integer",
            token,
        )
    if token < 0:
        raise validation_error(
            "greater_than_equal",
            loc,
            "Input should be greater than or equal to 0",
            token,
            {"ge": 0},
        )
    if token > _MAX_ID:
        raise validation_error(
            "less_than_equal",
            loc,
            f"Input should be less than or equal to {_MAX_ID}",
            token,
            {"le": _MAX_ID},
        )
