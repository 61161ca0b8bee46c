"""Every error the HTTP API answers, as ``{"error": {"type": ..., "message": ...}}``.

A client mistake is never a 500: a malformed parameter or body is 400 (FastAPI's 422 is
replaced), a missing or wrong token 401, an unknown run 404 (naming the id), a refused operator
action 409 (the exception's message). Only a fault of the server or its store is a 5xx, and
it too has the shape (``InternalError``, logged with its traceback).
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from .._errors import (
    CorruptRecord,
    InvalidOperation,
    StoreError,
    UnsafeFork,
    UsageError,
    WorkflowAlreadyExists,
    WorkflowNotFound,
)
from .schemas import ErrorBody

__all__ = ["ApiError", "declared", "install_error_handlers", "not_found", "strip_422"]

log = logging.getLogger("stalwart")

_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    413: "PayloadTooLarge",
    415: "UnsupportedMediaType",
}

# What the OpenAPI document declares, per kind of operation, so that clients (and
# schemathesis) know the error shape and when to expect it.
_DECLARED: dict[int, str] = {
    400: "A malformed parameter or body.",
    401: "The bearer token is missing or wrong.",
    404: "No run with this id.",
    409: "The action was refused (InvalidOperation, UnsafeFork, WorkflowAlreadyExists).",
    415: "A body that is not sent as application/json.",
    500: "A fault of the server (logged), or a record it cannot read (CorruptRecord).",
    503: "The store cannot be reached, or refused the request (StoreError).",
}


def declared(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The error answers an operation declares in the OpenAPI document (with the server's
    own faults, which any operation that reads the store may answer)."""
    return {s: {"model": ErrorBody, "description": _DECLARED[s]} for s in (*statuses, 500, 503)}


class ApiError(Exception):
    """An error answer: HTTP ``status``, error ``type`` and ``message``."""

    def __init__(self, status: int, type_: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.type = type_
        self.message = message


def not_found(workflow_id: str) -> ApiError:
    """The 404 of an unknown run (its message names the id, never the store)."""
    return ApiError(404, "WorkflowNotFound", f"no run with workflow_id {workflow_id!r}")


def error_response(
    status: int, type_: str, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    """The JSON answer of an error."""
    body = {"error": {"type": type_, "message": message}}
    return JSONResponse(body, status_code=status, headers=headers)


def _validation_message(request: Request, exc: RequestValidationError) -> str:
    parts = []
    for error in exc.errors()[:5]:
        loc = error.get("loc", ())
        if error.get("type") == "json_invalid":
            return "the body is not valid JSON"
        if len(loc) == 2 and loc[0] == "query":
            parts.append(_query_message(request, str(loc[1]), error))
            continue
        where = ".".join(str(p) for p in loc if p != "body") or "body"
        parts.append(f"{where}: {error.get('msg', 'invalid')}")
    return "; ".join(parts) or "malformed request"


_NUMBER_ERRORS = ("greater_than", "greater_than_equal", "less_than", "less_than_equal")


def _query_message(request: Request, name: str, error: dict[str, Any]) -> str:
    """A query parameter's mistake as the CLI says one: ``limit='abc': give a whole number
    from 1 to 1000``."""
    value, kind, ctx = error.get("input"), str(error.get("type", "")), error.get("ctx") or {}
    text = str(value)
    shown = f"{name}={text if len(text) <= 40 else text[:10] + '...'!r}"
    if kind == "missing":
        return f"{name}: required"
    if kind.startswith("int_") or kind in _NUMBER_ERRORS:
        low, high = _bounds(request, name)
        if name == "after":  # a cursor: its top is a row id's or an offset's, no bound to read
            path = str(getattr(request.scope.get("route"), "path", ""))
            what = (
                "the offset of a chunk" if path.endswith("/stream") else "the id of a journal entry"
            )
            return f"{shown}: give {what} (a whole number from {low})"
        span = f" from {low} to {high}" if low is not None and high is not None else ""
        return f"{shown}: give a whole number{span}"
    if kind.startswith("bool_"):
        return f"{shown}: give true or false"
    if kind == "literal_error":
        expected = str(ctx.get("expected", "")).replace("'", "").replace(" or ", ", ")
        return f"{shown}: give one of {expected}"
    if kind == "string_too_long":
        return f"{shown}: give at most {ctx.get('max_length')} characters"
    if kind == "string_too_short":
        least = ctx.get("min_length")
        return f"{shown}: give at least {least} character{'' if least == 1 else 's'}"
    if kind == "string_pattern_mismatch" and "\\x00" in str(ctx.get("pattern", "")):
        return f"{shown}: give a value without a NUL character"
    return f"{shown}: {error.get('msg', 'invalid')}"


def _bounds(request: Request, name: str) -> tuple[int | None, int | None]:
    """The ``ge`` and ``le`` the route declares for its query parameter ``name``."""
    dependant = getattr(request.scope.get("route"), "dependant", None)
    for field in getattr(dependant, "query_params", ()):
        if field.alias == name:
            low = next((m.ge for m in field.field_info.metadata if hasattr(m, "ge")), None)
            high = next((m.le for m in field.field_info.metadata if hasattr(m, "le")), None)
            return low, high
    return None, None


async def _api_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
    return error_response(exc.status, exc.type, exc.message, headers)


async def _invalid_request(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return error_response(400, "BadRequest", _validation_message(request, exc))


async def _http_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    type_ = _REASONS.get(exc.status_code, "HTTPError")
    message = exc.detail if isinstance(exc.detail, str) else type_
    return error_response(exc.status_code, type_, message, dict(exc.headers or {}))


async def _not_found(request: Request, exc: Exception) -> JSONResponse:
    workflow_id = request.path_params.get("workflow_id")
    if isinstance(workflow_id, str):
        error = not_found(workflow_id)
        return error_response(404, error.type, error.message)
    return error_response(404, "WorkflowNotFound", "no such run")


async def _refused(_request: Request, exc: Exception) -> JSONResponse:
    return error_response(409, type(exc).__name__, str(exc))


async def _usage(_request: Request, exc: Exception) -> JSONResponse:
    return error_response(400, type(exc).__name__, str(exc))


async def _store_error(_request: Request, exc: Exception) -> JSONResponse:
    log.error("ui: %s: %s", type(exc).__name__, exc)
    status = 500 if isinstance(exc, CorruptRecord) else 503
    return error_response(status, type(exc).__name__, str(exc))


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    # What the guard did not catch (it catches everything the routes raise): still the shape.
    kind = type(exc).__name__
    log.error("ui: %s %s failed: %s: %s", request.method, request.url.path, kind, exc)
    return error_response(500, "InternalError", f"the server failed ({kind}); its log says why")


def install_error_handlers(api: FastAPI) -> None:
    """Answer every error of ``api`` in the one shape."""
    api.add_exception_handler(ApiError, _api_error)
    api.add_exception_handler(RequestValidationError, _invalid_request)
    api.add_exception_handler(HTTPException, _http_error)
    api.add_exception_handler(WorkflowNotFound, _not_found)
    for refused in (InvalidOperation, UnsafeFork, WorkflowAlreadyExists):
        api.add_exception_handler(refused, _refused)
    api.add_exception_handler(UsageError, _usage)
    api.add_exception_handler(StoreError, _store_error)
    api.add_exception_handler(Exception, _unexpected)


def strip_422(document: dict[str, Any]) -> dict[str, Any]:
    """The OpenAPI document without FastAPI's 422 answers: this API answers 400 instead."""
    for operations in document.get("paths", {}).values():
        for operation in operations.values():
            operation.get("responses", {}).pop("422", None)
    schemas = document.get("components", {}).get("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)
    return document
