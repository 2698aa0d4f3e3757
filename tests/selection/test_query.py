"""The query and the used tools, read from the conversation and the task."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from toolsift.selection.query import MAX_USED_TOOLS, build_query, used_tools
from toolsift.selection.schemas import SelectRequest


def test_used_tools_are_the_most_recent_distinct_names_and_bounded() -> None:
    calls = [
        {"type": "tool_use", "id": f"c{i}", "name": f"tool_{i}", "input": {}} for i in range(150)
    ]
    request = SelectRequest.model_validate(
        {
            "messages": [
                {"role": "assistant", "content": calls[:100]},
                {"role": "assistant", "content": [*calls[100:], calls[0]]},
                {"role": "user", "content": "go on"},
            ],
            "task": {"recent_tools": ["tool_7", "bad name"]},
        }
    )
    used = used_tools(request)
    assert len(used) == MAX_USED_TOOLS
    assert used[:3] == ["tool_7", "tool_0", "tool_149"]
    assert used[-1] == f"tool_{149 - MAX_USED_TOOLS + 3}"


CALLED = [
    {"role": "system", "content": "You help customers."},
    {"role": "assistant", "content": "Let me look up the orders.", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "list_orders", "arguments": "{}"}}
    ]},
]  # fmt: skip


@pytest.mark.parametrize(
    "result",
    [
        # OpenAI: the tool's output is a message of its own.
        {"role": "tool", "tool_call_id": "c1", "content": "order row " * 4000},
        # Anthropic: a tool_result block in a user message.
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "c1", "content": "order row " * 4000}
        ]},
    ],
    ids=["openai", "anthropic"],
)  # fmt: skip
def test_a_tool_s_output_is_never_the_query(result: dict[str, Any]) -> None:
    """Whatever the shape, a conversation whose last turn is a tool's output is read from
    the assistant's words: the output is data (often long, and not a question)."""
    request = SelectRequest.model_validate({"messages": [*CALLED, result]})
    assert build_query(request) == "Let me look up the orders."


def test_a_recent_tool_is_a_tool_s_name_not_any_text() -> None:
    with pytest.raises(ValidationError, match=r"recent_tools\.0"):
        SelectRequest.model_validate(
            {"messages": [{"role": "user", "content": "x"}], "task": {"recent_tools": ["w" * 65]}}
        )
