"""LangGraph on stalwart: ``StalwartSaver(app)``, a checkpoint saver on the app's store.

::

    from stalwart.integrations.langgraph import StalwartSaver

    graph = builder.compile(checkpointer=StalwartSaver(app))
    graph.invoke(inputs, {"configurable": {"thread_id": "chat-1"}})

The graph keeps LangGraph's own execution model: a crash resumes the thread from its last
checkpoint when it is invoked again, and the nodes whose writes were checkpointed do not run
again. Install with ``pip install 'stalwart[langgraph]'``; docs/langgraph.md is the guide.
"""

from __future__ import annotations

try:
    import langgraph.checkpoint.base  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "stalwart.integrations.langgraph needs LangGraph; install it with "
        "pip install 'stalwart[langgraph]'"
    ) from exc

from ._saver import StalwartSaver

__all__ = ["StalwartSaver"]
