"""The routes of ``/api/v1``: reads and operator actions over the public Python API.

Every route is a plain ``def``, so FastAPI runs it on its thread pool, several at once. That is
safe with one app shared by all of them: the SQLite store holds one connection behind a lock
(each store verb is atomic under it), the PostgreSQL store draws a connection per verb from its
pool, and the operator verbs keep no state between calls (a worker's threads share an app the
same way). So nothing here takes a lock of its own.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hmac
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends, Header, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.convertors import Convertor, register_url_convertor

from .. import __version__, _inputs
from .._api_answers import (
    approvals_answer,
    decode_cursor,
    iso_time,
    journal_answer,
    run_answer,
    runs_page,
)
from .._errors import UsageError
from .._model import WorkflowInfo
from .._wire import breaker_json, queue_json, schedule_json, worker_json
from .errors import ApiError, declared, not_found
from .responses import JSONAnswer
from .schemas import (
    NO_NUL,
    ApprovalCount,
    ApprovalList,
    BreakerList,
    DecideBody,
    EmptyBody,
    EventBody,
    EventResult,
    ForkBody,
    Health,
    Journal,
    Name,
    QueueList,
    ResolveBody,
    RunDetail,
    RunPage,
    ScheduleList,
    Stats,
    Status,
    WorkerList,
)

__all__ = ["ServerState", "known_query", "router"]

MAX_LIMIT = 1000
MAX_BY = 200
MAX_ENTRY_ID = 2**63 - 1  # a journal row id is a signed 64-bit integer in both stores


@dataclasses.dataclass(frozen=True)
class ServerState:
    """What every route reads: the app, the token writes need, whether reads need it too."""

    app: Any
    token: str
    reads_need_token: bool


def _state(request: Request) -> ServerState:
    state: ServerState = request.app.state.stalwart
    return state


def _token_ok(state: ServerState, given: str | None) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), state.token.encode())


def _reader(request: Request) -> Any:
    """The app, once the request may read (on a non-loopback bind: with the token)."""
    state = _state(request)
    if state.reads_need_token:
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not _token_ok(state, given.strip()):
            raise ApiError(401, "Unauthorized", "reads need Authorization: Bearer TOKEN here")
    return state.app


_bearer = HTTPBearer(
    auto_error=False,
    scheme_name="token",
    description="The token `stalwart ui` printed at start (or --token, $STALWART_UI_TOKEN).",
)


@dataclasses.dataclass(frozen=True)
class Writer:
    """An authorised write: the app, and who acts (recorded in the journal)."""

    app: Any
    by: str


def _writer(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    x_stalwart_by: Annotated[
        str | None,
        Header(
            max_length=MAX_BY,
            description='Who acts, recorded with the action (default: "ui").',
        ),
    ] = None,
) -> Writer:
    state = _state(request)
    if credentials is None or not _token_ok(state, credentials.credentials):
        raise ApiError(401, "Unauthorized", "writes need Authorization: Bearer TOKEN")
    by = (x_stalwart_by or "").strip() or "ui"
    return Writer(state.app, by)


def known_query(request: Request) -> None:
    """Refuse a query parameter the route does not declare (``?windw=1h``), as an unknown body
    field is refused, instead of answering as if it were not there."""
    dependant = getattr(request.scope.get("route"), "dependant", None)
    if dependant is None or not request.query_params:
        return
    known: set[str] = set()
    calls = set()
    todo = [dependant]
    while todo:  # the route's own parameters and those of its dependencies
        each = todo.pop()
        known.update(str(p.alias) for p in each.query_params)
        calls.add(each.call)
        todo.extend(each.dependencies)
    state = _state(request)
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    authorised = scheme.lower() == "bearer" and _token_ok(state, given.strip())
    if not authorised and (_writer in calls or (_reader in calls and state.reads_need_token)):
        return  # the missing token is the mistake to answer (401)
    unknown = sorted(set(request.query_params) - known)
    if unknown:
        given = ", ".join(repr(name) for name in unknown)
        allowed = ", ".join(sorted(known)) or "none"
        raise ApiError(
            400, "BadRequest", f"unknown query parameter {given}: this endpoint takes {allowed}"
        )


Reader = Annotated[Any, Depends(_reader)]
Write = Annotated[Writer, Depends(_writer)]


def _run_id(workflow_id: str, request: Request) -> str:
    """The run's id from the path; an id no run can have (a control character in it, which
    the Python API refuses) is not found."""
    head, _, tail = getattr(request.scope.get("route"), "path_format", "").partition(
        "{workflow_id}"
    )
    path = request.scope.get("path", "")
    if not path.endswith(workflow_id + tail):
        # a route's pattern ends in ``$``, which matches before a final newline too: the
        # id is then the rest of the path, as ``/runs/{id}`` reads it (never ``x`` for
        # ``/runs/x/journal%0A``)
        raise not_found(path.partition(head)[2])
    try:
        return _inputs.name(workflow_id, "workflow_id")
    except UsageError:
        raise not_found(workflow_id) from None


RunId = Annotated[str, Depends(_run_id)]


class _AnyRunId(Convertor[str]):
    """A run's id in the path, whatever it holds: ``path`` (``.*``) stops at a newline, so
    ``/runs/a%0Ab`` matched no route and answered a generic ``NotFound``."""

    regex = r"[\s\S]*"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("run_id", _AnyRunId())


router = APIRouter()
_READ = declared(401)
_READ_PARAMS = declared(400, 401)
_READ_RUN = declared(401, 404)
_READ_RUN_PARAMS = declared(400, 401, 404)
_WRITE = declared(400, 401, 404, 409, 415)


# -- times and cursors ------------------------------------------------------------------------


def _before(text: str | None) -> WorkflowInfo | _dt.datetime | None:
    if text is None:
        return None
    found = iso_time(text) or decode_cursor(text)
    if found is None:
        raise ApiError(
            400, "BadRequest", f"before={text[:80]!r}: pass next_before of a page or an ISO time"
        )
    return found


def _since(text: str | None) -> _dt.datetime | None:
    if text is None:
        return None
    when = iso_time(text)
    if when is None:
        raise ApiError(400, "BadRequest", f"since={text[:80]!r}: pass an ISO 8601 time")
    return when


# -- reads ------------------------------------------------------------------------------------


@router.get(
    "/runs", response_model=RunPage, responses=_READ_PARAMS, summary="List runs, newest first"
)
def list_runs(
    app: Reader,
    *,
    status: Status | None = None,
    name: Annotated[Name | None, Query(description="Only runs of this workflow.")] = None,
    queue: Annotated[Name | None, Query(description="Only runs of this queue.")] = None,
    parent_id: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=2000,
            pattern=NO_NUL,
            description="Only the child runs of this run.",
        ),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 50,
    before: Annotated[
        str | None,
        Query(max_length=2000, description="next_before of the previous page, or an ISO time."),
    ] = None,
    since: Annotated[
        str | None, Query(max_length=100, description="Created at or after this ISO time.")
    ] = None,
) -> JSONAnswer:
    """Runs matching every filter given, newest first on (created_at, workflow_id), with the
    number of runs per status for the filters other than ``status``."""
    cursor, after = _before(before), _since(since)
    try:
        page = runs_page(
            app, status, name, limit, before=cursor, queue=queue, since=after, parent_id=parent_id
        )
    except UsageError as exc:
        raise ApiError(400, type(exc).__name__, str(exc)) from None
    return JSONAnswer(page)


@router.get(
    "/runs/{workflow_id:run_id}/journal",
    response_model=Journal,
    responses=_READ_RUN_PARAMS,
    summary="A run's journal",
)
def run_journal(
    app: Reader,
    workflow_id: RunId,
    after: Annotated[
        int | None,
        Query(
            ge=0,
            le=MAX_ENTRY_ID,
            description="Only the entries whose id is over this one (the id of the last "
            "entry you have); without it, from the first.",
        ),
    ] = None,
    limit: Annotated[
        int | None,
        Query(
            ge=1,
            le=MAX_LIMIT,
            description="At most this many entries (``more`` says whether others follow); "
            "without it, every one.",
        ),
    ] = None,
) -> JSONAnswer:
    """Every step, attempt, wait, event, approval, compensation and operator action, in
    order, with full inputs, outputs and errors; with ``after``, only the entries since, and
    with ``limit`` at most that many (``more``: the next page starts after the last ``id``).
    ``total`` is how many entries the whole journal has, counted after these were read: when
    the entries you hold plus the new ones are fewer, one was committed late below ``after``;
    read the whole journal again."""
    return JSONAnswer(journal_answer(app, workflow_id, after, limit))


@router.get(
    "/approvals", response_model=ApprovalList, responses=_READ_PARAMS, summary="Approval requests"
)
def list_approvals(
    app: Reader,
    pending: Annotated[bool, Query(description="Only undecided requests.")] = True,
    all_: Annotated[
        bool, Query(alias="all", description="Decided requests too (pending=false).")
    ] = False,
) -> JSONAnswer:
    """Approval requests, oldest first: the undecided ones, or with ``all=true`` (or
    ``pending=false``) the decided ones too, with who decided, when and why."""
    return JSONAnswer(approvals_answer(app, pending=pending and not all_))


@router.get(
    "/approvals/count",
    response_model=ApprovalCount,
    responses=_READ,
    summary="How many approval requests wait",
)
def count_approvals(app: Reader) -> JSONAnswer:
    """How many approval requests are undecided (what the console shows beside Approvals),
    one count instead of the whole list."""
    return JSONAnswer({"pending": app._pending_approvals()})


@router.get("/queues", response_model=QueueList, responses=_READ, summary="Queues")
def list_queues(app: Reader) -> JSONAnswer:
    """Every queue, with its limits and its pending and running runs, fleet-wide."""
    return JSONAnswer({"queues": [queue_json(q) for q in app.queues()]})


@router.get("/workers", response_model=WorkerList, responses=_READ, summary="Live workers")
def list_workers(app: Reader) -> JSONAnswer:
    """The worker processes serving this store, as their last renewal left them."""
    return JSONAnswer({"workers": [worker_json(w) for w in app.workers()]})


@router.get("/breakers", response_model=BreakerList, responses=_READ, summary="Circuit breakers")
def list_breakers(app: Reader) -> JSONAnswer:
    """The fleet's circuit breakers that have counted a failure."""
    return JSONAnswer({"breakers": [breaker_json(b) for b in app.breakers()]})


@router.get("/schedules", response_model=ScheduleList, responses=_READ, summary="Schedules")
def list_schedules(app: Reader) -> JSONAnswer:
    """The schedules kept in the store, by name, with their next tick."""
    return JSONAnswer({"schedules": [schedule_json(s) for s in app.schedules()]})


@router.get("/stats", response_model=Stats, responses=_READ_PARAMS, summary="The overview")
def stats(
    app: Reader,
    window: Annotated[
        Literal["1h", "24h", "7d"],
        Query(description="The last hour, day or week, in buckets of 5 min, 1 h or 6 h."),
    ] = "24h",
) -> JSONAnswer:
    """What the console's overview draws: runs created and ended per bucket (by status), step
    attempts, failures and p50/p95 latency by step, runs and spend by workflow (runs created in
    the window), and each queue's pending and running runs now. Times are ISO 8601 UTC."""
    return JSONAnswer(app._stats_json(window))


@router.get("/health", response_model=Health, summary="Whether the server answers")
def health(request: Request) -> JSONAnswer:
    """The version and the store; needs no token."""
    state = _state(request)
    return JSONAnswer(
        {
            "ok": True,
            "version": __version__,
            "store": state.app._runtime.name,
            "reads_need_token": state.reads_need_token,
        }
    )


# -- writes -----------------------------------------------------------------------------------


def _detail(app: Any, workflow_id: str, **extra: Any) -> JSONAnswer:
    return JSONAnswer(run_answer(app, workflow_id, **extra))


def _decision(verb: str) -> None:
    """The route that approves (or rejects) a run's pending request."""

    def decide(
        w: Write, workflow_id: RunId, body: Annotated[DecideBody | None, Body()] = None
    ) -> JSONAnswer:
        body = body or DecideBody()
        getattr(w.app, verb)(workflow_id, by=w.by, reason=body.reason, approval_id=body.approval_id)
        return _detail(w.app, workflow_id)

    decide.__doc__ = (
        f"{verb.capitalize()} the run's pending approval request (or the one named "
        "``approval_id``)."
    )
    router.post(
        f"/runs/{{workflow_id:run_id}}/{verb}",
        response_model=RunDetail,
        responses=_WRITE,
        summary=f"{verb.capitalize()} a request",
        name=verb,
    )(decide)


_decision("approve")
_decision("reject")


@router.post(
    "/runs/{workflow_id:run_id}/cancel",
    response_model=RunDetail,
    responses=_WRITE,
    summary="Cancel a run",
)
def cancel(
    w: Write, workflow_id: RunId, body: Annotated[EmptyBody | None, Body()] = None
) -> JSONAnswer:
    """Cancel the run: at once if it waits, else at its next step boundary; its
    compensations run."""
    w.app.cancel(workflow_id, by=w.by)
    return _detail(w.app, workflow_id)


@router.post(
    "/runs/{workflow_id:run_id}/retry",
    response_model=RunDetail,
    responses=_WRITE,
    summary="Retry a run",
)
def retry(
    w: Write, workflow_id: RunId, body: Annotated[EmptyBody | None, Body()] = None
) -> JSONAnswer:
    """Dead-letter redrive: a failed run resumes from its failed step; a needs_attention run
    not waiting on resolve tries again."""
    w.app.retry(workflow_id, by=w.by)
    return _detail(w.app, workflow_id)


@router.post(
    "/runs/{workflow_id:run_id}/resolve",
    response_model=RunDetail,
    responses=_WRITE,
    summary="Settle an in-doubt step",
)
def resolve(w: Write, workflow_id: RunId, body: ResolveBody) -> JSONAnswer:
    """Record ``result`` as what the in-doubt irreversible step ``seq`` did, or run it again
    with ``"rerun": true`` (exactly one of the two)."""
    given = "result" in body.model_fields_set
    if given == body.rerun:
        raise ApiError(400, "BadRequest", 'give exactly one of "result" or "rerun": true')
    if body.rerun:
        w.app.resolve(workflow_id, body.seq, rerun=True, by=w.by)
    else:
        w.app.resolve(workflow_id, body.seq, result=body.result, by=w.by)
    return _detail(w.app, workflow_id)


@router.post(
    "/runs/{workflow_id:run_id}/fork",
    response_model=RunDetail,
    responses=_WRITE,
    status_code=201,
    summary="Fork a run from a step",
)
def fork(w: Write, workflow_id: RunId, body: ForkBody) -> JSONAnswer:
    """A new run reusing the journal before ``from_seq``; answers the new run. Refused (409,
    ``UnsafeFork``) when an irreversible step would run again, unless ``allow_reexecute``."""
    handle = w.app.fork(
        workflow_id,
        body.from_seq,
        new_id=body.new_id,
        allow_reexecute=body.allow_reexecute,
        by=w.by,
    )
    response = _detail(w.app, handle.workflow_id)
    response.status_code = 201
    return response


@router.post(
    "/runs/{workflow_id:run_id}/events",
    response_model=EventResult,
    responses=_WRITE,
    summary="Send an event",
)
def send_event(w: Write, workflow_id: RunId, body: EventBody) -> JSONAnswer:
    """Send event ``name`` to the run; ``delivered`` is false for a repeat of a
    ``dedup_key`` the run already got."""
    delivered = w.app.send_event(
        workflow_id, body.name, body.payload, dedup_key=body.dedup_key, by=w.by
    )
    return _detail(w.app, workflow_id, delivered=delivered)


@router.get(
    "/runs/{workflow_id:run_id}", response_model=RunDetail, responses=_READ_RUN, summary="A run"
)
def run_detail(app: Reader, workflow_id: RunId) -> JSONAnswer:
    """The run: its status, what it waits on, the step it executes now, its usage."""
    return JSONAnswer(run_answer(app, workflow_id))
