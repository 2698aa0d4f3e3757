"""The in-process baselines: `baseline_bm25s` stems, drops stop words and splits identifiers
in the name, the description and the query; both rank by what a tool's text says."""

from __future__ import annotations

import pytest

from toolsift.tools.schemas import ToolCreate
from toolsift_tooling.eval.baselines import Bm25sRetriever, document, lexical_document, split_words
from toolsift_tooling.eval.dataset import EvalTool


def _tool(name: str, description: str, title: str | None = None) -> EvalTool:
    return EvalTool(name, ToolCreate(name=name, title=title, description=description))


TOOLS = [
    # Neither the name nor the description says "refunds": only a stem can match it.
    _tool("reverse_charge", "Refund a card payment to the customer."),
    _tool("getUserProfile", "Returns the account details of one person."),
    _tool("billing_export", "Wraps fetchInvoicePdf and returns the document as bytes."),
    _tool("base64Encode", "Encodes bytes as text."),
    # Nothing here but stop words and a word no query below uses.
    _tool("noise", "It is in the list and there are no such things as these, to be or not."),
    _tool("weather_now", "Current weather conditions for a city."),
]


@pytest.fixture(scope="module")
def bm25s() -> Bm25sRetriever:
    return Bm25sRetriever(TOOLS)


class TestSplitWords:
    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ("getUserProfile", "get User Profile"),
            ("get_user_profile", "get user profile"),
            ("get-user-profile", "get user profile"),
            ("users.profile.get", "users profile get"),
            ("api/v1:users", "api v 1 users"),
            ("getHTTPStatus", "get HTTP Status"),
            ("base64Encode", "base 64 Encode"),
            ("Wraps fetchInvoicePdf today", "Wraps fetch Invoice Pdf today"),
        ],
    )
    def test_identifiers_become_their_words(self, text: str, expected: str) -> None:
        assert split_words(text) == expected

    def test_the_indexed_text_splits_the_name_and_identifiers_in_the_description(self) -> None:
        assert lexical_document(TOOLS[2]) == (
            "billing export Wraps fetch Invoice Pdf and returns the document as bytes"
        )

    def test_the_dataset_name_is_used_when_the_registry_name_differs(self) -> None:
        tool = _tool("weather_now", "Current weather.", title="weather.now")
        assert lexical_document(tool).startswith("weather now ")
        # The dense baseline embeds the name split and the description as written.
        assert document(tool) == "weather now Current weather."


class TestBm25sBaseline:
    def test_stemming_finds_refund_for_refunds(self, bm25s: Bm25sRetriever) -> None:
        assert bm25s.search("refunds", 10) == ["reverse_charge"]
        assert bm25s.search("refunded payments", 10) == ["reverse_charge"]

    @pytest.mark.parametrize(
        "query", ["get user profile", "getUserProfile", "get_user_profile", "user profiles"]
    )
    def test_a_camel_case_name_is_found_by_its_words(
        self, bm25s: Bm25sRetriever, query: str
    ) -> None:
        assert bm25s.search(query, 10)[0] == "getUserProfile"

    def test_an_identifier_inside_the_description_is_split(self, bm25s: Bm25sRetriever) -> None:
        assert bm25s.search("invoice pdf", 10) == ["billing_export"]

    def test_letters_and_digits_are_split(self, bm25s: Bm25sRetriever) -> None:
        assert bm25s.search("encode to base 64", 10)[0] == "base64Encode"

    def test_stop_words_match_nothing(self, bm25s: Bm25sRetriever) -> None:
        assert bm25s.search("is it in the list", 10) == ["noise"]  # "list" only
        assert bm25s.search("it is in the and there are no such", 10) == []
        # "the" and "for" are in every other description; only "weather" and "city" count.
        assert bm25s.search("the weather for the city", 10) == ["weather_now"]

    def test_a_query_with_no_known_word_finds_nothing(self, bm25s: Bm25sRetriever) -> None:
        assert bm25s.search("zyxwv qwerty", 10) == []
        assert bm25s.search("", 10) == []

    def test_k_cuts_the_ranking(self, bm25s: Bm25sRetriever) -> None:
        # "bytes" is in two descriptions.
        assert len(bm25s.search("bytes", 10)) == 2
        assert len(bm25s.search("bytes", 1)) == 1
