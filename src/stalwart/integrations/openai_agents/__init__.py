"""The OpenAI Agents SDK on stalwart (``pip install 'stalwart[openai-agents]'``).

Inside an ``async def`` ``@app.workflow``, ``await DurableRunner.run(agent, input)`` in place
of ``Runner.run``: every model call and function tool call is a journaled step, so a crash
resumes the agent loop without repeating what completed, and a tool with ``needs_approval``
waits durably for ``app.approve`` / ``app.reject``. ``StalwartSession`` keeps a conversation in
the app's store. docs/openai-agents.md walks through it.

Step names are compatibility data: a run in flight replays against them. They are
``AGENT/model``, ``AGENT/tool/TOOL`` and ``session/SESSION_ID/METHOD``; approvals wait under the
subject ``AGENT/tool/TOOL``.
"""

from ._agents import ToolOptions, model_step_name, tool_options, tool_step_name
from ._model import StreamingRefused
from ._runner import DurableRunner
from ._session import StalwartSession, session_step_name

__all__ = [
    "DurableRunner",
    "StalwartSession",
    "StreamingRefused",
    "ToolOptions",
    "model_step_name",
    "session_step_name",
    "tool_options",
    "tool_step_name",
]
