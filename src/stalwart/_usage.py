"""What a step attempt used: what ``record_usage`` added, and the usage a model's response
carries, read by duck typing (OpenAI chat and responses, Anthropic, pydantic-ai's
``ModelResponse``: a ``usage`` with both token counts), priced with the app's price table."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from ._model import Usage

__all__ = ["attempt_usage", "price_of", "usage_in", "warn_if_unrecorded"]

log = logging.getLogger("stalwart")

_TOKEN_NAMES = (("prompt_tokens", "completion_tokens"), ("input_tokens", "output_tokens"))
# OpenAI and Anthropic responses name the model ``model``, pydantic-ai's ``ModelResponse``
# ``model_name``: the price table is looked up by it.
_MODEL_NAMES = ("model", "model_name")


def _field(holder: Any, name: str) -> Any:
    try:
        if isinstance(holder, Mapping):
            return holder.get(name)
        return getattr(holder, name, None)
    except Exception:  # a property that raises: the result carries no usage we can read
        return None


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def usage_in(result: Any) -> dict[str, Any] | None:
    """The token counts (and model) a response carries in its ``usage``, or ``None``."""
    usage = _field(result, "usage")
    if usage is None or callable(usage):  # a method is never called on a step's result
        return None
    for name_in, name_out in _TOKEN_NAMES:
        tokens_in, tokens_out = _field(usage, name_in), _field(usage, name_out)
        if _count(tokens_in) and _count(tokens_out):  # both, or it is not a usage record
            found: dict[str, Any] = {"input_tokens": tokens_in, "output_tokens": tokens_out}
            for key in _MODEL_NAMES:
                model = _field(result, key)
                if isinstance(model, str) and model:
                    found["model"] = model
                    break
            return found
    return None


def price_of(prices: Mapping[str, tuple[float, float]], model: str) -> tuple[float, float] | None:
    """The price of ``model``: its exact name's, else that of the name after its provider's
    prefix, the part after the last ``/`` or ``:`` (``openai/gpt-4.1`` and ``openai:gpt-4.1``
    are priced as ``gpt-4.1``); ``None`` when neither is in ``prices``."""
    price = prices.get(model)
    if price is None:
        bare = model[max(model.rfind("/"), model.rfind(":")) + 1 :]
        if bare and bare != model:
            price = prices.get(bare)
    return price


def attempt_usage(
    recorded: Mapping[str, Any], result: Any, prices: Mapping[str, tuple[float, float]]
) -> tuple[Usage | None, str | None]:
    """One attempt's usage, and the model it came from: ``recorded`` (what ``record_usage``
    added) plus what ``result`` carries, with the cost from ``prices`` (per million tokens
    in and out) when a model is known and no cost was given. ``(None, None)`` when nothing
    was used."""
    spent = dict(recorded)
    found = usage_in(result) if result is not None else None
    if found is not None:
        for key in ("input_tokens", "output_tokens"):
            spent[key] = spent.get(key, 0) + found[key]
        spent.setdefault("model", found.get("model"))
    if not spent:
        return None, None
    tokens_in, tokens_out = spent.get("input_tokens", 0), spent.get("output_tokens", 0)
    cost, model = spent.get("cost", 0.0), spent.get("model")
    price = price_of(prices, model) if model else None
    if not cost and price is not None:
        cost = (tokens_in * price[0] + tokens_out * price[1]) / 1_000_000
    return Usage(tokens_in, tokens_out, cost, attempts=1), model


def warn_if_unrecorded(runtime: Any, step: Any, usage: Usage | None) -> None:
    """Log one WARNING per step name (per app, per process) when an attempt of a step under
    ``Retry.llm()`` completed without recording any usage: its tokens are not in the run's
    totals, nor counted by its budget."""
    if usage is not None or not getattr(step.retry, "provider_calls", False):
        return
    warned: set[str] = runtime.usage_warned
    if step.name in warned:
        return
    warned.add(step.name)
    log.warning(
        "step %r runs under Retry.llm() but recorded no usage, so its tokens and cost are "
        "not counted (app.usage, Budget): return the response instead of its text (with "
        "output=ChatCompletion, or the SDK's response class, to get the object back), or "
        "call stalwart.record_usage() in the step",
        step.name,
    )
