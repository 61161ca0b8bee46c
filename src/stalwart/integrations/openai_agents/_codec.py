"""The JSON form of what the SDK hands across a step boundary: model responses, tool outputs
and session items. The first run decodes what it recorded too, so it sees what a replay sees."""

from __future__ import annotations

import json
from typing import Any

from agents import ModelResponse
from agents.usage import deserialize_usage, serialize_usage
from openai.types.responses import ResponseOutputItem
from pydantic import BaseModel, TypeAdapter, ValidationError

__all__ = [
    "decode_item",
    "decode_response",
    "encode_item",
    "encode_response",
    "encode_tool_output",
]

_OUTPUT_ITEM: TypeAdapter[Any] = TypeAdapter(ResponseOutputItem)
_JSON_SCALARS = (str, int, float, bool, type(None))


def _dump(value: Any) -> Any:
    """A pydantic item as the fields it was given (``exclude_unset``: an item sent back to the
    model must not gain ``null`` fields it never had)."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_unset=True)
    return value


def encode_response(response: ModelResponse) -> dict[str, Any]:
    """A model response as JSON; its ``usage`` key is what stalwart charges to the step."""
    return {
        "output": [_dump(item) for item in response.output],
        "usage": serialize_usage(response.usage),
        "response_id": response.response_id,
        "request_id": response.request_id,
        "raw_usage": response.raw_usage,
    }


def _output_item(data: Any) -> Any:
    if not isinstance(data, dict):
        return data
    try:
        return _OUTPUT_ITEM.validate_python(data)
    except ValidationError:
        return data  # an item type this openai version does not know: the SDK takes dicts too


def decode_response(data: dict[str, Any]) -> ModelResponse:
    """The model response :func:`encode_response` recorded."""
    return ModelResponse(
        output=[_output_item(item) for item in data["output"]],
        usage=deserialize_usage(data["usage"]),
        response_id=data.get("response_id"),
        request_id=data.get("request_id"),
        raw_usage=data.get("raw_usage"),
    )


def encode_tool_output(output: Any) -> Any:
    """A tool's result as journaled: JSON values as they are, the SDK's structured outputs
    (``ToolOutputText``, ``ToolOutputImage``, ``ToolOutputFileContent``) as their dicts, which
    the SDK reads back as the same outputs, and anything else as ``str(output)``, the text
    the SDK sends the model for it."""
    if isinstance(output, BaseModel):
        dumped = output.model_dump(mode="json", exclude_none=True)
        return dumped if "type" in dumped else str(output)
    if isinstance(output, list | tuple):
        return [encode_tool_output(item) for item in output]
    if _is_json(output):
        return output
    return str(output)


def _is_json(value: Any) -> bool:
    if isinstance(value, _JSON_SCALARS):
        return True
    if isinstance(value, list):
        return all(_is_json(item) for item in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_json(v) for k, v in value.items())
    return False


def encode_item(item: Any) -> str:
    """A session item (a Responses input item: a dict, or an SDK model) as JSON text."""
    return json.dumps(_dump(item), ensure_ascii=False, separators=(",", ":"), default=_default)


def _default(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_unset=True)
    raise TypeError(f"a session item holds a {type(value).__name__}, which is not JSON")


def decode_item(text: str) -> Any:
    """The session item :func:`encode_item` stored."""
    return json.loads(text)
