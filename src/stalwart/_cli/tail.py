"""``stalwart tail``: a run's stream as it arrives, until the run ends."""

from __future__ import annotations

import sys
from typing import Any

import click

from .._chunks import StreamChunk, stream_text
from .._errors import WorkflowNotFound
from .._wire import chunk_json, dumps
from ._output import WholeNumber
from ._root import CliError, cli, open_app, url_option

__all__: list[str] = []


class _Text:
    """Prints a stream's text as ``stream_text`` reads it: what was written before the tail
    began exactly so; after that, each chunk as it comes, and when a step's later attempt
    starts streaming again, a line on stderr says so (what the earlier attempt printed cannot
    be taken back from a terminal)."""

    def __init__(self) -> None:
        self.latest: dict[int, int] = {}

    def backlog(self, chunks: list[StreamChunk]) -> None:
        for chunk in chunks:
            self._note(chunk)
        self._write(stream_text(chunks))

    def live(self, chunk: StreamChunk) -> None:
        if self._note(chunk) and chunk.seq is not None:
            click.echo(f"\n[step seq {chunk.seq} streams again: attempt {chunk.attempt}]", err=True)
        elif chunk.seq is not None and chunk.attempt < self.latest[chunk.seq]:
            return
        if isinstance(chunk.data, str):
            self._write(chunk.data)

    def _note(self, chunk: StreamChunk) -> bool:
        """Record the chunk's attempt; whether it is a later attempt of a seq seen before."""
        if chunk.seq is None:
            return False
        seen = self.latest.get(chunk.seq)
        if seen is None or chunk.attempt > seen:
            self.latest[chunk.seq] = chunk.attempt
        return seen is not None and chunk.attempt > seen

    @staticmethod
    def _write(text: str) -> None:
        if text:
            sys.stdout.write(text)
            sys.stdout.flush()


@cli.command("tail")
@click.argument("workflow_id")
@click.option("--stream", default="default", show_default=True, help="Which stream of the run.")
@click.option(
    "--after",
    type=WholeNumber(-1, example=41),
    default=-1,
    help="Only the chunks whose offset is over this one (-1, the default: from the first).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON Lines, one chunk a line.")
@url_option
@click.pass_context
def tail_command(
    ctx: click.Context, workflow_id: str, stream: str, after: int, as_json: bool
) -> None:
    """Print a run's stream as it arrives (what it emits with stalwart.emit) and exit 0 once
    the run is terminal or in needs_attention."""
    with open_app(ctx) as app:
        try:
            backlog = list(app.stream(workflow_id, stream=stream, after=after, follow=False))
        except WorkflowNotFound as exc:
            raise CliError(f"{exc}; `stalwart ls` lists the runs") from None
        except ValueError as exc:
            raise CliError(str(exc)) from None
        if backlog:
            after = backlog[-1].offset
        text = _Text()
        emit: Any = (lambda chunk: click.echo(dumps(chunk_json(chunk)))) if as_json else text.live
        if as_json:
            for chunk in backlog:
                emit(chunk)
        else:
            text.backlog(backlog)
        for chunk in app.stream(workflow_id, stream=stream, after=after):
            emit(chunk)
        if not as_json:
            click.echo()
