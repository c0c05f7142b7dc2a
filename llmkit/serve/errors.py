"""Errors a request can meet, each with its HTTP status, in the shape each API's SDK parses.

The SDKs turn a status and an error body into a typed exception (``anthropic.RateLimitError``,
``openai.AuthenticationError``, ...), so the server must send both right: a bad request is a 400
that says what is wrong and where, never a 500.
"""
from __future__ import annotations

# Anthropic's error type for each status; OpenAI's bodies use these names too where they exist
ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                   404: "not_found_error", 408: "timeout_error", 413: "request_too_large", 429: "rate_limit_error",
                   500: "api_error", 503: "overloaded_error", 504: "timeout_error", 529: "overloaded_error"}
OPENAI_TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 403: "permission_error",
                404: "invalid_request_error", 408: "timeout", 413: "invalid_request_error", 429: "rate_limit_exceeded",
                500: "server_error", 503: "server_error", 504: "timeout", 529: "server_error"}
OPENAI_CODES = {401: "invalid_api_key", 404: "model_not_found", 413: "request_too_large",
                429: "rate_limit_exceeded", 503: "overloaded"}


class APIError(Exception):
    """An error answer: ``status``, a message that says what to do, and optional headers."""

    def __init__(self, status: int, message: str, *, headers: dict[str, str] | None = None,
                 param: str | None = None):
        super().__init__(message)
        self.status, self.message, self.headers, self.param = status, message, headers or {}, param


def bad_request(message: str, param: str | None = None) -> APIError:
    return APIError(400, message, param=param)


def anthropic_body(error: APIError) -> dict:
    return {"type": "error", "error": {"type": ANTHROPIC_TYPES.get(error.status, "api_error"),
                                       "message": error.message}}


def openai_body(error: APIError) -> dict:
    return {"error": {"message": error.message, "type": OPENAI_TYPES.get(error.status, "server_error"),
                      "param": error.param, "code": OPENAI_CODES.get(error.status)}}
