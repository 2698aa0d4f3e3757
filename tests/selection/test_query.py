"""The query and the used tools, read from the conversation and the task."""

from __future__ import annotations

from toolsift.selection.query import MAX_USED_TOOLS, used_tools
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
