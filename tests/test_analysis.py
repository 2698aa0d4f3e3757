from __future__ import annotations

import pytest

from toolsift.lexical.analysis import expand_identifiers, split_identifier, tool_fields


class TestSplitIdentifier:
    @pytest.mark.parametrize(
        ("name", "expected"),
        [
            ("order_status", "order status"),
            ("getOrderStatus", "get Order Status"),
            ("getHTTPStatus_v2.list", "get HTTP Status v2 list"),
            ("api.v1.users", "api v1 users"),
            ("Bing_CN_MCP::bing-cn-mcp", "Bing CN MCP bing cn mcp"),
        ],
    )
    def test_splits(self, name: str, expected: str) -> None:
        assert split_identifier(name) == expected


class TestExpandIdentifiers:
    def test_plain_prose_is_untouched(self) -> None:
        text = "Get the status of an order. It ships soon."
        assert expand_identifiers(text) == text

    def test_camel_and_dotted_tokens_gain_their_parts(self) -> None:
        assert expand_identifiers("call getOrderStatus or math.factorial") == (
            "call getOrderStatus or math.factorial get Order Status math factorial"
        )


class TestToolFields:
    def test_empty_fields_are_dropped_and_parameters_are_read(self) -> None:
        fields = tool_fields(
            name="send_email",
            title=None,
            description="Send an email.",
            input_schema={
                "type": "object",
                "properties": {"toAddress": {"type": "string", "description": "Recipient"}},
            },
            examples=[],
        )
        assert [text for _, text in fields] == [
            "send_email",
            "Send an email.",
            "to Address",
            "Recipient",
        ]
