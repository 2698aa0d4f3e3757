"""The query and the used tools, read from the conversation and the task."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from toolsift.errors import Unprocessable
from toolsift.selection.query import MAX_STEPS, MAX_USED_TOOLS, build_query, steps, used_tools
from toolsift.selection.schemas import MAX_TEXT, SelectRequest


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


# One conversation in the four shapes the select reads: the user asks, the model calls a
# tool, the tool answers (long), the model speaks, then calls a second tool.
ASKED = "Where is order 1234 and can I change its address?"
SAID = "It ships tomorrow. Let me check the address."
SHAPES = {
    "chat_completions": [
        {"role": "user", "content": ASKED},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "order_status", "arguments": "{}"}}
        ]},
        {"role": "tool", "tool_call_id": "c1", "content": "status row " * 2000},
        {"role": "assistant", "content": SAID, "tool_calls": [
            {"id": "c2", "type": "function", "function": {"name": "get_address", "arguments": "{}"}}
        ]},
    ],
    "anthropic": [
        {"role": "user", "content": [{"type": "text", "text": ASKED}]},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "c1", "name": "order_status", "input": {}}
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "c1", "content": "status row " * 2000}
        ]},
        {"role": "assistant", "content": [
            {"type": "text", "text": SAID},
            {"type": "tool_use", "id": "c2", "name": "get_address", "input": {}},
        ]},
    ],
    # The Responses API's input items, as a client passes its `input` list through: items
    # without a role, a reasoning item, and the model's text as `output_text`.
    "responses": [
        {"role": "user", "content": [{"type": "input_text", "text": ASKED}]},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "function_call", "call_id": "c1", "name": "order_status", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "status row " * 2000},
        {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": SAID, "annotations": []}]},
        {"type": "function_call", "call_id": "c2", "name": "get_address", "arguments": "{}"},
    ],
    # Gemini's `contents`: parts, `model` for the model, calls and their results as parts.
    "gemini": [
        {"role": "user", "parts": [{"text": ASKED}]},
        {"role": "model", "parts": [{"functionCall": {"name": "order_status", "args": {}}}]},
        {"role": "user", "parts": [
            {"functionResponse": {"name": "order_status", "response": {"rows": "status row " * 2000}}}
        ]},
        {"role": "model", "parts": [
            {"text": "The user wants the address too.", "thought": True},
            {"text": SAID},
            {"functionCall": {"name": "get_address", "args": {}}},
        ]},
    ],
}  # fmt: skip


@pytest.mark.parametrize("shape", SHAPES)
def test_the_shapes_of_one_conversation_give_one_query(shape: str) -> None:
    request = SelectRequest.model_validate({"messages": SHAPES[shape]})
    assert build_query(request) == ASKED
    assert used_tools(request) == ["get_address", "order_status"]
    # With no user text left, the model's words are the query, never a tool's output.
    last_turn = SelectRequest.model_validate({"messages": SHAPES[shape][1:]})
    assert build_query(last_turn) == SAID


def test_responses_items_of_any_type_are_taken_and_only_calls_are_read() -> None:
    """The Responses API adds item types; a client passing its input through must not fail
    on one. A chat message's `name` is its speaker's, never a tool called."""
    request = SelectRequest.model_validate(
        {
            "messages": [
                {"role": "user", "name": "alice", "content": "book a flight to Lisbon"},
                {"type": "web_search_call", "id": "ws_1", "status": "completed"},
                {"type": "item_reference", "id": "msg_0"},
                {"type": "custom_tool_call", "call_id": "c3", "name": "run_sql", "input": "x"},
                {"type": "mcp_call", "server_label": "github", "name": "create_issue"},
                {"type": "a_type_of_next_year", "name": "not_a_call", "content": "not a text"},
                {"type": "function_call", "call_id": "c4", "name": 7},
            ]
        }
    )
    assert build_query(request) == "book a flight to Lisbon"
    # `mcp_call` names a tool of the caller's MCP server, not one of the registry.
    assert used_tools(request) == ["run_sql"]


def test_a_gemini_turn_without_a_role_is_the_user_s_and_sdk_spellings_are_read() -> None:
    request = SelectRequest.model_validate(
        {
            "messages": [
                {"role": "model", "parts": [{"function_call": {"name": "list_orders"}}]},
                {"parts": [{"text": "cancel the second one"}]},
                {"role": "function", "parts": [{"text": "a function's output, as text"}]},
            ]
        }
    )
    assert build_query(request) == "cancel the second one"
    assert used_tools(request) == ["list_orders"]


def test_too_long_a_gemini_turn_names_its_parts() -> None:
    request = SelectRequest.model_validate(
        {"messages": [{"role": "user", "parts": [{"text": "x" * (MAX_TEXT + 1)}]}]}
    )
    with pytest.raises(Unprocessable) as refused:
        build_query(request)
    assert refused.value.field == "messages[0].parts"


def test_a_conversation_of_items_alone_is_read_from_the_task() -> None:
    """A Responses client chaining `previous_response_id` sends only the new items."""
    request = SelectRequest.model_validate(
        {
            "messages": [{"type": "function_call_output", "call_id": "c1", "output": "ok " * 50}],
            "task": {"plan": "refund order 1234", "recent_tools": ["refund"]},
        }
    )
    assert build_query(request) == "refund order 1234 refund"
    assert used_tools(request) == ["refund"]


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
