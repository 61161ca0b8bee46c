"""``GET /api/v1/runs/{id}/stream``: a run's stream as Server-Sent Events, live.

One event per chunk (``id:`` its offset, ``event: chunk``, ``data:`` the chunk as JSON), then
``event: end`` once the run is terminal or in ``needs_attention`` (as ``app.stream`` ends). A
browser's ``EventSource`` that reconnects sends the last ``id`` it saw as ``Last-Event-ID``,
which wins over ``after``: it resumes after that chunk, missing none and repeating none. While
no chunk comes, a comment line every ``KEEP_ALIVE`` seconds keeps proxies from closing the
connection (and tells the server when the client left).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Header, Query
from fastapi.responses import StreamingResponse

from .._wire import chunk_json
from .api import Reader, RunId
from .errors import ApiError, declared

__all__ = ["KEEP_ALIVE", "stream_router"]

KEEP_ALIVE = 15.0
MAX_OFFSET = 2**63 - 1
MAX_STREAM = 200

stream_router = APIRouter()

_EVENTS = {
    "description": "Server-Sent Events: `event: chunk` per chunk (`id:` its offset, `data:` "
    "the chunk as JSON: offset, stream, seq, attempt, data, at), then `event: end` once the "
    "run is terminal or in needs_attention.",
    "content": {"text/event-stream": {"schema": {"type": "string"}}},
}


def _resume_from(after: int, last_event_id: str | None) -> int:
    if last_event_id is None or not last_event_id.strip():
        return after
    try:
        offset = int(last_event_id.strip())
    except ValueError:
        offset = -2
    if not -1 <= offset <= MAX_OFFSET:
        raise ApiError(
            400, "BadRequest", "Last-Event-ID must be the offset of a chunk (an integer, 0 or more)"
        )
    return offset


@stream_router.get(
    "/runs/{workflow_id:run_id}/stream",
    response_class=StreamingResponse,
    responses={200: _EVENTS, **declared(400, 401, 404)},
    summary="A run's stream, live (Server-Sent Events)",
)
def run_stream(
    app: Reader,
    workflow_id: RunId,
    stream: Annotated[
        str, Query(min_length=1, max_length=MAX_STREAM, description="Which stream of the run.")
    ] = "default",
    after: Annotated[
        int,
        Query(
            ge=-1,
            le=MAX_OFFSET,
            description="Only the chunks whose offset is over this one; -1: from the first.",
        ),
    ] = -1,
    last_event_id: Annotated[
        str | None,
        Header(
            alias="Last-Event-ID",
            max_length=40,
            description="The last event id a reconnecting EventSource saw; wins over `after`.",
        ),
    ] = None,
) -> StreamingResponse:
    """The run's chunks with offsets over ``after`` (or ``Last-Event-ID``), then each new one as
    the run emits it, until the run is terminal or in ``needs_attention``."""
    if "\x00" in stream:
        raise ApiError(400, "BadRequest", "a stream name cannot hold NUL")
    start = _resume_from(after, last_event_id)
    app.handle(workflow_id)  # 404 before the answer starts

    async def events() -> AsyncIterator[str]:
        seen = start
        while True:
            try:
                async for chunk in app.stream_async(
                    workflow_id, stream=stream, after=seen, timeout=KEEP_ALIVE
                ):
                    seen = chunk.offset
                    data = json.dumps(chunk_json(chunk), separators=(",", ":"))
                    yield f"id: {chunk.offset}\nevent: chunk\ndata: {data}\n\n"
                break
            except TimeoutError:
                yield ": keep-alive\n\n"
        yield "event: end\ndata: {}\n\n"

    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(events(), media_type="text/event-stream", headers=headers)
