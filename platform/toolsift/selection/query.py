"""The query is the last user message plus task state: "yes, do it" alone matches nothing."""

from __future__ import annotations

import re
from collections.abc import Iterable

from ..errors import Unprocessable
from ..kit.text import scrub
from ..lexical.analysis import expand_identifiers
from ..tools.schemas import TOOL_NAME_PATTERN
from .schemas import CALL_ITEMS, MAX_TEXT, Message, SelectRequest

_TOOL_NAME = re.compile(TOOL_NAME_PATTERN)


#: Blocks of text: Anthropic's and Chat Completions' `text`, the Responses API's `input_text`
#: (what the user wrote) and `output_text` (what the model answered).
_TEXT_BLOCKS = (None, "text", "input_text", "output_text")


def _texts(message: Message) -> Iterable[str]:
    if isinstance(message.content, str):
        yield message.content
    elif message.content:
        for block in message.content:
            if block.get("type") in _TEXT_BLOCKS and isinstance(block.get("text"), str):
                yield block["text"]
    # Gemini's text parts; a `thought` part is the model's reasoning, not what was asked.
    for part in message.parts or []:
        if isinstance(part.get("text"), str) and not part.get("thought"):
            yield part["text"]


#: Who speaks for the model: Gemini says `model`.
_MODEL = ("assistant", "model")
#: Roles whose turns are a tool's output (Gemini's earlier `function`), never the query.
_OUTPUT = ("tool", "function", None)


def build_query(request: SelectRequest) -> str:
    """Only the message the query is read from is bounded (the body limit bounds the rest):
    an earlier tool result of 40,000 characters is an ordinary conversation."""
    index = _query_message(request.messages)
    message = request.messages[index]
    texts = _texts_of_query(message)
    if sum(len(t) for t in texts) > MAX_TEXT:
        where = "content" if message.content or message.parts is None else "parts"
        raise Unprocessable(
            f"the message the query is read from must be at most {MAX_TEXT} characters of text",
            field=f"messages[{index}].{where}",
        )
    parts = [*texts, request.task.plan, *request.task.recent_tools]
    # Terms are distinct in scoring, so expanding identifiers never double-counts a word.
    return expand_identifiers(scrub(" ".join(p for p in parts if p)))


def _query_message(messages: list[Message]) -> int:
    """The last user message with text, or else the last assistant message with text, or
    else the last message. Never a tool's output (an OpenAI `tool` message or
    `function_call_output` item, as an Anthropic `tool_result` block is no text): it is data
    the agent fetched, often long, not what anyone asked, and every shape of one
    conversation must give one query."""
    for roles in (("user",), _MODEL):
        for index in range(len(messages) - 1, -1, -1):
            message = messages[index]
            if message.role in roles and any(t.strip() for t in _texts(message)):
                return index
    return len(messages) - 1


def _texts_of_query(message: Message) -> list[str]:
    return list(_texts(message)) if message.role not in _OUTPUT else []


def _calls(message: Message) -> Iterable[str]:
    """The names of the tools `message` calls, in each shape `_texts` reads."""
    called: list[object] = []
    if isinstance(message.content, list):  # Anthropic
        called += [b.get("name") for b in message.content if b.get("type") == "tool_use"]
    for call in message.tool_calls or []:  # Chat Completions
        function = call.get("function")
        called.append(function.get("name") if isinstance(function, dict) else None)
    for part in message.parts or []:  # Gemini: `functionCall`, or as its Python SDK writes it
        asked = part.get("functionCall", part.get("function_call"))
        called.append(asked.get("name") if isinstance(asked, dict) else None)
    # A Responses API call item; a chat message's `name` is its speaker's, not a tool's.
    if message.type in CALL_ITEMS:
        called.append((message.model_extra or {}).get("name"))
    return (name for name in called if isinstance(name, str))


#: Used tools a select keeps at most, the most recently called first.
MAX_USED_TOOLS = 64


def used_tools(request: SelectRequest) -> list[str]:
    """Tools called in the conversation or the task, most recent first, without repeats."""
    names = [name for message in request.messages for name in _calls(message)]
    names += request.task.recent_tools
    # A name no registry tool can have (NUL, spaces, SQL) is dropped, not looked up.
    valid = (n for n in reversed(names) if _TOOL_NAME.fullmatch(n))
    # The most recent few: a body of thousands of names cost a select 30 times its usual
    # time, and no turn's prompt keeps that many used tools anyway.
    return list(dict.fromkeys(valid))[:MAX_USED_TOOLS]


#: A request is read as steps from this many sentences on (docs/quality.md, "Steps of a request").
MIN_STEPS = 4
#: Sentences shorter than this many words ("Thanks.", "Please help.") are not steps.
MIN_STEP_WORDS = 3
#: Steps embedded at most, the first ones: each costs the select one more embedding.
MAX_STEPS = 8
_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+")


def steps(query: str, min_steps: int = MIN_STEPS) -> list[str]:
    """The query's sentences when it reads as several steps, or none.

    A request of several steps ("Look up the SLA ... Then back up ... Finally, get the price
    of ...") has one vector, an average of its steps, that may be near none of the tools they
    need; dense also measures each step. Two or three sentences are mostly a scene and an ask
    ("We are building an app ... We need a model that ..."), where the scene misleads.
    """
    parts = [
        p
        for p in (s.strip() for s in _SENTENCE_END.split(query))
        if len(p.split()) >= MIN_STEP_WORDS
    ]
    return parts[:MAX_STEPS] if len(parts) >= min_steps else []
