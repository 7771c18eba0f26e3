"""llmd's one exception tree, and how an API error becomes an OpenAI-shaped body.

    LlmdError
    ├── ConfigError                  bad config file: names the key, the value, what was expected
    ├── EngineGaveUp                 the supervisor stopped restarting a failing engine
    ├── RuntimeDirInUse              another llmd runs with this runtime directory
    ├── BenchError                   `llmd bench` cannot run: a bad option or length spec
    │   └── TargetUnavailable        the target does not answer, or not as an engine would
    ├── ReleaseError                 a release cannot be created, read or removed (llmd/releases)
    ├── SizingError                  a model cannot be sized: no config.json, a missing key
    ├── TuneError                    `llmd tune` cannot run: bad option, llmd serving, no boot
    ├── UsageError                   the usage store cannot be opened, read or written
    ├── TenantError                  `llmd tenant` cannot: no such tenant, a name taken or bad
    └── ApiError                     answered to an HTTP client (status, code, Retry-After)
        ├── InvalidRequest           400 invalid_request
        ├── BodyTooLarge             413 body_too_large
        ├── UnsupportedMediaType     415 invalid_request (content type or coding; + Accept-Encoding)
        ├── HeadersTooLarge          431 headers_too_large (the request head over its limits)
        ├── RequestTimeout           408 request_timeout (head or body slower than read_timeout_s)
        ├── ContextLengthExceeded    400 context_length_exceeded
        ├── UnsupportedEndpoint      400 unsupported_endpoint (the model's engines serve others)
        ├── InvalidConfig            400 invalid_config (admin API: a reload the config refuses)
        ├── NotFound                 404 not_found
        ├── ModelNotFound            404 model_not_found (in the engine's words)
        ├── BackendRefused           the backend's 4xx for the client's input, in llmd's shape
        ├── MethodNotAllowed         405 method_not_allowed (+ Allow)
        ├── ActionRefused            409 action_refused (admin API: makes no sense now)
        ├── InvalidApiKey            401 invalid_api_key (keys are configured, this one is not)
        ├── PermissionDenied         403 permission_denied (a valid key without this right)
        ├── RateLimited              429 rate_limited (tenant over its limits; + Retry-After)
        ├── QueueFull                429 queue_full (the class queue is full; + Retry-After)
        ├── BudgetExceeded           429 budget_exceeded (a token budget; + x-ratelimit-*)
        ├── QueueTimeout             503 queue_timeout (queue wait over timeout or deadline)
        ├── EngineUnavailable        503 engine_unavailable (+ Retry-After)
        ├── Draining                 503 draining (+ Retry-After)
        ├── Overloaded               503 overloaded (the SLO guard sheds the class; + Retry-After)
        ├── TooManyConnections       503 too_many_connections (server.max_connections in progress)
        ├── RequestCancelled         503 cancelled (an operator ended it; x-should-retry: false)
        ├── StoreUnavailable         503 store_unavailable (the Responses store cannot be read)
        ├── EngineStalled            503 engine_stalled (no token from the engine; + Retry-After)
        ├── EngineError              502 engine_error (engine failed mid-request)
        └── InternalError            500 internal_error (a fault in llmd; logged with its id)

Library and OS errors are translated into these at the boundary that meets them (config loading,
the upstream relay); `ApiError.body()` is the only place an error body is written.
"""

from __future__ import annotations

import json
import math

from llmd.quoting import encodable


class LlmdError(Exception):
    """Base of every error llmd raises on purpose."""


class ConfigError(LlmdError):
    """The configuration cannot be used; the message names the key, value and expectation
    (never a value that may be a secret). `key` is the dotted key at fault, when one is, and
    `line` its line in the file, when known."""

    def __init__(self, message: str, key: str | None = None, line: int | None = None) -> None:
        super().__init__(message)
        self.key = key
        self.line = line


class EngineGaveUp(LlmdError):
    """The engine failed to boot too often within the failure window; llmd stops trying."""


class RuntimeDirInUse(LlmdError):
    """Another llmd runs with this runtime directory (its sockets and its engine are there)."""


class BenchError(LlmdError):
    """`llmd bench` cannot run as asked: a bad option or length spec, an unreachable target."""


class TargetUnavailable(BenchError):
    """The bench's target does not answer, or not with a model list and completions (`llmd
    bench` exits 69, EX_UNAVAILABLE, for it; 64 for the other BenchErrors)."""


class ReleaseError(LlmdError):
    """A release record cannot be created, read or removed: the name is taken or invalid, the
    record is unreadable, the engine's interpreter cannot be asked; the message says which."""


class SizingError(LlmdError):
    """A model's memory cannot be worked out: its config.json is missing, unreadable or lacks a
    key the sizing needs, or a dtype is unknown."""


class TuneError(LlmdError):
    """`llmd tune` cannot run as asked: a bad option, llmd serving on the GPU, an engine that
    does not boot with a setting."""


class UsageError(LlmdError):
    """The usage store (llmd/usage/store.py) cannot be opened, read or written; the message
    names the file and SQLite's reason."""


class TenantError(LlmdError):
    """A `llmd tenant` verb cannot do what was asked: no such tenant, a name taken or not
    allowed, a bad class or limit; the message says which."""


class ApiError(LlmdError):
    """An error answered to an HTTP client in the OpenAI shape.

    `message` and `param` often quote what a client sent; text no UTF-8 encoder takes (a lone
    UTF-16 surrogate from a JSON escape) is kept escaped (`\\udc00`), so every error body is
    strict JSON (RFC 8259 §8.2) and every log line writes.
    """

    status = 500  # the HTTP status
    # Stable machine-readable reason (DESIGN.md table); also the label metrics, status counts and
    # log lines carry (`reason`).
    code = "internal_error"
    type = "server_error"  # the OpenAI error type
    # `x-should-retry`: what the openai clients obey over their own retry rule (openai-python
    # `_base_client._should_retry`: "true" retries, "false" never; else 408, 409, 429, 5xx
    # retry). None: no header, the client's rule applies.
    should_retry: bool | None = None

    def __init__(
        self, message: str, *, param: str | None = None, retry_after_s: float | None = None
    ) -> None:
        message = encodable(message)
        super().__init__(message)
        self.message = message
        self.param = encodable(param) if param is not None else None  # offending request field
        # Seconds, sent as `Retry-After` rounded up; required for 429 and 503.
        self.retry_after_s = retry_after_s
        # More response headers the status calls for, e.g. `Allow` on a 405.
        self.extra_headers: list[tuple[bytes, bytes]] = []

    @property
    def reason(self) -> str:
        """The code's name: what metrics, status counts and log lines call this error."""
        return self.code

    def body(self) -> bytes:
        """The body `{"error": {"message", "type", "param", "code"}}` (OpenAI; vLLM 0.10.1+)."""
        error = {"message": self.message, "type": self.type, "param": self.param, "code": self.code}
        return json.dumps({"error": error}).encode()

    def headers(self) -> list[tuple[bytes, bytes]]:
        """Response headers: content type, `Retry-After` (whole seconds, >= 1) on 429/503, and
        `x-should-retry` when the error says whether a client should resend."""
        headers = [(b"content-type", b"application/json")]
        if self.retry_after_s is not None or self.status in (429, 503):
            seconds = max(1, math.ceil(self.retry_after_s or 1))
            headers.append((b"retry-after", str(seconds).encode()))
        if self.should_retry is not None:
            headers.append((b"x-should-retry", b"true" if self.should_retry else b"false"))
        return headers + self.extra_headers

    def sse_event(self) -> bytes:
        """The in-band form for a stream that already started: an error event, then `[DONE]`."""
        return b"data: " + self.body() + b"\n\ndata: [DONE]\n\n"


class InvalidRequest(ApiError):
    """The body is not valid JSON, not an object, or a field has the wrong type or value."""

    status = 400
    code = "invalid_request"
    type = "invalid_request_error"


class BodyTooLarge(ApiError):
    """The request body is larger than `server.max_body_bytes`."""

    status = 413
    code = "body_too_large"
    type = "invalid_request_error"


class UnsupportedMediaType(ApiError):
    """The body is not `application/json`, or is sent in a content coding llmd does not decode
    (then `Accept-Encoding` lists the ones it does: RFC 9110 §15.5.16)."""

    status = 415
    code = "invalid_request"
    type = "invalid_request_error"

    def __init__(self, message: str, *, param: str, accept_encoding: str | None = None) -> None:
        super().__init__(message, param=param)
        if accept_encoding is not None:
            self.extra_headers.append((b"accept-encoding", accept_encoding.encode()))


class RequestTimeout(ApiError):
    """The request's head or body did not arrive within `server.read_timeout_s` (RFC 9110
    §15.5.9); the answer closes the connection, whose request was not read to its end."""

    status = 408
    code = "request_timeout"
    type = "invalid_request_error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.extra_headers.append((b"connection", b"close"))


class HeadersTooLarge(ApiError):
    """The request head (request line and headers) is over `server.max_header_bytes`, or has
    more than `server.max_headers` headers (RFC 6585 §5)."""

    status = 431
    code = "headers_too_large"
    type = "invalid_request_error"


class InvalidConfig(ApiError):
    """Admin API: the config file a reload read does not validate (nothing changed)."""

    status = 400
    code = "invalid_config"
    type = "invalid_request_error"


class ContextLengthExceeded(ApiError):
    """Prompt tokens plus requested output tokens do not fit the engine's `max_model_len`."""

    status = 400
    code = "context_length_exceeded"
    type = "invalid_request_error"


class NotFound(ApiError):
    """No such route or resource (404 not_found)."""

    status = 404
    code = "not_found"
    type = "invalid_request_error"


class ModelNotFound(ApiError):
    """The request names a model no backend serves: 404 `model_not_found` (OpenAI's code for
    it), in llmd's shape like every refusal, with the engine's own words as the message
    (vLLM's `_check_model`: 0.32 names the `served` models, 0.31 does not, `name_served`).
    vLLM itself answers type `NotFoundError` and the number 404 as `code`; llmd reshapes the
    engine's refusals the same way (BackendRefused).
    """

    status = 404
    code = "model_not_found"
    type = "invalid_request_error"

    def __init__(self, model: str, served: list[str], name_served: bool = True) -> None:
        aliases = f" Valid aliases: {', '.join(served)}." if name_served else ""
        super().__init__(f"The model `{model}` does not exist.{aliases}", param="model")


class UnsupportedEndpoint(ApiError):
    """The model is served here, but by engines that do not serve this endpoint (a chat model
    asked for embeddings, a pooling model for chat): 400 naming the endpoint, the model's
    engine kind and the models here that do serve it, or else what kind of model would
    (`needs`: the endpoint table's words, DESIGN.md)."""

    status = 400
    code = "unsupported_endpoint"
    type = "invalid_request_error"

    def __init__(
        self, path: str, model: str, kind: str | None, serving: list[str], needs: str
    ) -> None:
        others = (
            f"models here that serve it: {', '.join(serving)}"
            if serving
            else f"no model here serves it ({needs} does)"
        )
        super().__init__(
            f"model {model!r} does not serve {path} "
            + (f"(it runs on a {kind} engine); " if kind else "(its engine has no such route); ")
            + others,
            param="model",
        )


class BackendRefused(ApiError):
    """A backend answered 4xx to what the client sent (vLLM's own checks: `temperature: -1`,
    `top_p: 2`, ...): a rejection, passed on in llmd's shape with the backend's `status` and
    message and its `param` when it named one. `code` is `context_length_exceeded` for vLLM's
    context-length message, `body_too_large` for a 413, `not_found` for a 404, else
    `invalid_request`. vLLM 0.32 answers these as `{"error": {"message", "type":
    "BadRequestError", "param", "code": 400}}` (vllm/entrypoints/serve/exception_handling/
    error_response.py); llmd's own errors use string codes, and so does this one."""

    type = "invalid_request_error"

    def __init__(self, status: int, code: str, message: str, *, param: str | None) -> None:
        super().__init__(message, param=param)
        self.status = status
        self.code = code


class MethodNotAllowed(ApiError):
    """The route exists but not for this HTTP method; `Allow` lists the methods it takes
    (RFC 9110 §15.5.6)."""

    status = 405
    code = "method_not_allowed"
    type = "invalid_request_error"

    def __init__(self, message: str, *, allow: str) -> None:
        super().__init__(message)
        self.extra_headers.append((b"allow", allow.encode("latin-1")))


class ActionRefused(ApiError):
    """Admin API: an operator action that makes no sense in llmd's current state (a resume
    during shutdown, a restart during a restart); the message says why."""

    status = 409
    code = "action_refused"
    type = "invalid_request_error"


class InvalidApiKey(ApiError):
    """Keys are configured and the request's `Authorization: Bearer KEY` is missing or unknown.

    Shaped as OpenAI answers a bad key (401, type `invalid_request_error`); the key is never
    echoed or logged.
    """

    status = 401
    code = "invalid_api_key"
    type = "invalid_request_error"


class PermissionDenied(ApiError):
    """The request's key is valid but its tenant may not do this (read `/metrics`)."""

    status = 403
    code = "permission_denied"
    type = "invalid_request_error"


class RateLimited(ApiError):
    """The tenant has as many requests queued as it may (its `max_queued`); retry later."""

    status = 429
    code = "rate_limited"
    type = "rate_limit_error"


class QueueFull(ApiError):
    """The request's class queue holds `queue_size` requests already; retry later."""

    status = 429
    code = "queue_full"
    type = "rate_limit_error"


class BudgetExceeded(ApiError):
    """The tenant has spent a token budget (llmd/admission/budgets.py) for now: retry after
    `retry_after_s`, when it has refilled enough. `ratelimit` are OpenAI's
    `x-ratelimit-limit-tokens`, `-remaining-tokens` and `-reset-tokens` headers."""

    status = 429
    code = "budget_exceeded"
    type = "rate_limit_error"

    def __init__(
        self, message: str, *, retry_after_s: float, ratelimit: list[tuple[bytes, bytes]]
    ) -> None:
        super().__init__(message, retry_after_s=retry_after_s)
        self.extra_headers.extend(ratelimit)


class QueueTimeout(ApiError):
    """The request waited in llmd's queue past its class's timeout or its own deadline."""

    status = 503
    code = "queue_timeout"
    type = "server_error"


class EngineUnavailable(ApiError):
    """The engine is starting, restarting or has given up; retry after `retry_after_s`."""

    status = 503
    code = "engine_unavailable"
    type = "server_error"


class Draining(ApiError):
    """llmd is draining (maintenance or shutdown) and admits no new requests."""

    status = 503
    code = "draining"
    type = "server_error"


class Overloaded(ApiError):
    """The SLO guard sheds new requests of this class (llmd/admission/guard.py, levels 3 and
    4); retry after `retry_after_s`, its expected recovery."""

    status = 503
    code = "overloaded"
    type = "server_error"


class TooManyConnections(ApiError):
    """The public listener has `server.max_connections` requests in progress."""

    status = 503
    code = "too_many_connections"
    type = "server_error"


class RequestCancelled(ApiError):
    """An operator cancelled this request (`POST /requests/{id}/cancel` on the admin API).

    503 with `x-should-retry: false`: the status says the service did not serve it, the header
    keeps the official openai clients (which retry any 5xx twice) from sending it again, so a
    cancelled request stays cancelled. Other clients see the code `cancelled`.
    """

    status = 503
    code = "cancelled"
    type = "server_error"
    should_retry = False


class StoreUnavailable(ApiError):
    """The Responses store (llmd/endpoints/store.py) cannot be read or written: its file or
    directory is unreadable or full. 503, with Retry-After."""

    status = 503
    code = "store_unavailable"
    type = "server_error"


class EngineStalled(ApiError):
    """The engine produced nothing for this request for longer than its stall or idle timeout
    (llmd/supervisor/stall.py): the request is ended (in-band once its stream started) and the
    engine restarted, or the upstream's breaker opened; retry after `retry_after_s`."""

    status = 503
    code = "engine_stalled"
    type = "server_error"


class EngineError(ApiError):
    """The engine failed while serving this request (connection lost, engine 5xx)."""

    status = 502
    code = "engine_error"
    type = "server_error"


class InternalError(ApiError):
    """An unexpected exception inside llmd before the response started: a bug, answered 500
    with the request's id (the log line that says what happened carries the same id)."""

    status = 500
    code = "internal_error"
    type = "server_error"

    def __init__(self, request_id: str | None = None) -> None:
        where = f" (request {request_id})" if request_id else ""
        super().__init__(f"internal error in llmd{where}; its log says what happened")
