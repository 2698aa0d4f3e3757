"""The query and the used tools, read from the conversation and the task."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from toolsift.selection.query import MAX_STEPS, MAX_USED_TOOLS, build_query, steps, used_tools
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


class TestSteps:
    def test_four_sentences_of_three_words_or_more_are_steps(self) -> None:
        text = "Find the weather in Paris. Book a table for two! Is the museum open? Email my team."
        assert steps(text) == [
            "Find the weather in Paris.",
            "Book a table for two!",
            "Is the museum open?",
            "Email my team.",
        ]

    def test_fewer_are_one_request(self) -> None:
        assert steps("We are building an app. We need a model that labels photos.") == []
        assert steps("Find the weather in Paris. Book a table for two. Email my team.") == []

    def test_short_sentences_are_not_steps(self) -> None:
        text = "Hi there. Find the weather in Paris. Thanks! Book a table for two. Email my team."
        assert steps(text) == []
        assert steps(text + " Then call a taxi.") == [
            "Find the weather in Paris.",
            "Book a table for two.",
            "Email my team.",
            "Then call a taxi.",
        ]

    def test_semicolons_split_and_only_the_first_are_kept(self) -> None:
        text = "; ".join(f"then do step number {i}" for i in range(MAX_STEPS + 3))
        found = steps(text)
        assert len(found) == MAX_STEPS
        assert found[0] == "then do step number 0;"
        assert found[-1] == f"then do step number {MAX_STEPS - 1};"

    def test_a_number_or_a_name_with_dots_does_not_split(self) -> None:
        text = (
            "Pay 3.50 euros at example.com now. Find the weather in Paris. Book a table now."
            " Email my team."
        )
        assert steps(text)[0] == "Pay 3.50 euros at example.com now."
