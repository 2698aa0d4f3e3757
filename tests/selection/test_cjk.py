"""Chinese, Japanese and Korean text is indexed and searched as overlapping pairs of characters.

The text search parser keeps a run of CJK characters, often a whole sentence, as one word:
before migration 0035 a tool described in Chinese matched only a query holding that very run.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.fixtures.factories import Caller, agent_key, tool_body
from tests.selection.bm25_formula import bm25_scores, tool_terms
from toolsift.selection.schemas import MAX_TEXT

OwnerConn = psycopg.Connection[tuple[Any, ...]]

CATALOG = [
    ("get_weather", "获取指定城市的实时天气预报，包括温度、降水和风力。"),
    ("query_tickets", "查询12306火车票余票信息，需要出发站、到达站和出发日期。"),
    ("get_price", "获取指定交易对的当前价格"),
    ("create_repository", "创建 Gitee 仓库"),
    ("gmail_search", "Gmail内で指定したクエリに一致するメールを検索します。"),
    ("fix_spelling", "한국어 맞춤법(오탈자, 띄어쓰기, 문법)을 검사하고 교정합니다."),
    ("order_status", "Get the shipping status of an order"),
]


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("查询天气预报", "查询 询天 天气 气预 预报"),
        ("使用API查询", "使用 API 查询"),
        ("東京の天気", "東京 京の の天 天気"),
        ("맞춤법 검사", "맞춤 춤법 검사"),
        ("天气。明天，「好」", "天气 明天 好"),
        ("一", "一"),
        ("。", ""),
    ],
)
def test_cjk_runs_become_pairs_of_characters(owner_conn: OwnerConn, text: str, words: str) -> None:
    (pairs,) = owner_conn.execute("SELECT toolsift_cjk_bigrams(%s)", (text,)).fetchone() or (None,)
    assert pairs is not None
    assert pairs.split() == words.split()


def test_a_long_run_gives_every_pair(owner_conn: OwnerConn) -> None:
    """The longest text a query is read from, one run: n - 1 pairs, in order (built in one
    pass: a pair cut from the run by offset walked it from its start, quadratic in it)."""
    run = ("天气预报" * (MAX_TEXT // 4 + 1))[:MAX_TEXT]
    (pairs,) = owner_conn.execute("SELECT toolsift_cjk_bigrams(%s)", (run,)).fetchone() or (None,)
    assert pairs is not None
    words = pairs.split()
    assert len(words) == MAX_TEXT - 1
    assert words[:5] == ["天气", "气预", "预报", "报天", "天气"]
    assert words[-1] == run[-2:]


@pytest.mark.parametrize(
    "text",
    ["", "Get the shipping status of an order", "getOrderStatus v2.list: naïve café, Ünïcode"],
)
def test_text_without_cjk_comes_back_as_it_was(owner_conn: OwnerConn, text: str) -> None:
    (same,) = owner_conn.execute("SELECT toolsift_cjk_bigrams(%s)", (text,)).fetchone() or (None,)
    assert same == text


@pytest.fixture
def cjk_agent(admin: Caller) -> Caller:
    tools = [tool_body(name, description) for name, description in CATALOG]
    admin.ok(admin.put("/admin/v1/tools", {"tools": tools}))
    return agent_key(admin, [])


@pytest.mark.parametrize(
    ("query", "tool", "pair"),
    [
        # No query shares a whole run with the description it needs.
        ("北京明天天气怎么样？", "get_weather", "天气"),
        ("帮我买一张去上海的火车票", "query_tickets", "火车"),
        ("比特币现在的价格是多少", "get_price", "价格"),
        ("在Gitee上新建一个仓库", "create_repository", "仓库"),
        ("請求書のメールを探して", "gmail_search", "メー"),
        ("이 문장의 맞춤법 좀 고쳐 줘", "fix_spelling", "맞춤"),
    ],
)
def test_bm25_finds_a_tool_by_the_words_of_another_sentence(
    cjk_agent: Caller, query: str, tool: str, pair: str
) -> None:
    body = cjk_agent.ok(cjk_agent.select(query, mode="bm25", k=1, debug=True))
    assert [t["name"] for t in body["tools"]] == [tool]
    assert pair in body["candidates"][0]["matched_terms"]


def test_a_tools_postings_are_pairs_of_characters(cjk_agent: Caller, owner_conn: OwnerConn) -> None:
    terms = tool_terms(owner_conn, cjk_agent.tenant_id, "get_weather")
    assert {"实时", "天气", "预报", "温度"} <= terms
    assert not any(len(term) > 2 for term in terms if "\u4e00" <= term[0] <= "\u9fff")


def test_served_scores_are_bm25_of_the_pairs(cjk_agent: Caller, owner_conn: OwnerConn) -> None:
    """The score of a CJK query is the formula over its pairs, as for any other word."""
    body = cjk_agent.ok(
        cjk_agent.select("查询明天的天气和火车票价格", mode="bm25", debug=True, k=50)
    )
    served = {c["name"]: c["score"] for c in body["candidates"]}
    expected = bm25_scores(owner_conn, cjk_agent.tenant_id, body["query"], set())
    assert {"get_weather", "query_tickets", "get_price"} <= served.keys()
    assert served.keys() == expected.keys()
    for name, score in expected.items():
        assert abs(served[name] - score) <= 4 * 2**-32, name
