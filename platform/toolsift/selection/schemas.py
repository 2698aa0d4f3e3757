from __future__ import annotations

from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from ..access.schemas import RoleName
from ..kit.schemas import Schema
from ..kit.text import MAX_DEPTH, too_deep
from ..tools.definitions import Format
from ..tools.schemas import MAX_TOOL_NAME

MAX_TEXT = 32_768
Mode = Literal["bm25", "dense", "hybrid"]


#: Responses API items that call a tool by its `name` (`query.used_tools` reads them).
CALL_ITEMS = ("function_call", "custom_tool_call")


class Message(BaseModel):
    """A chat turn in Anthropic, OpenAI or Gemini shape, or a Responses API input item; only
    text and tool names are read.

    Gemini's turns carry `parts` and say `model` for the model; one without a role is the
    user's, as Gemini reads it.

    A Responses item other than a message (`function_call`, `function_call_output`,
    `reasoning`...) has a `type` and no `role`. Any such type is taken, since that API adds
    item types, and only the calls' names are read: a client that passes its `input` list
    through must not fail on the first new one. Sizes are the body limit's to bound: the
    text of the one message the query is read from is checked when the query is built
    (`query.build_query`)."""

    model_config = ConfigDict(extra="allow")

    # Before `role`, which reads them: a message must say who speaks, an item need not, and
    # a Gemini turn without a role is the user's.
    type: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,63}$")] | None = None
    parts: list[dict[str, Any]] | None = None
    role: (
        Literal["user", "assistant", "model", "system", "tool", "function", "developer"] | None
    ) = Field(default=None, validate_default=True)
    content: str | list[dict[str, Any]] | None = None
    tool_calls: list[dict[str, Any]] | None = None

    @field_validator("role")
    @classmethod
    def _role_unless_item(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None and info.data.get("parts") is not None:
            return "user"
        if value is None and info.data.get("type", "message") in (None, "message"):
            raise PydanticCustomError("missing", "Field required")
        return value

    @field_validator("parts", mode="before")
    @classmethod
    def _list_of_parts(cls, value: Any) -> Any:
        """One error that names `parts`, as for `content`."""
        if value is None:
            return value
        if not isinstance(value, list):
            raise PydanticCustomError("parts_type", "Input should be a list of parts")
        return _objects(value, "part", "parts")

    @field_validator("content", mode="before")
    @classmethod
    def _text_or_blocks(cls, value: Any) -> Any:
        """One error that names `content`: for a union pydantic reports each member it
        tried under a path of its own (`content.str`, `content.list[dict[str,any]]`)."""
        if value is None or isinstance(value, str):
            return value
        if not isinstance(value, list):
            raise PydanticCustomError(
                "content_type", "Input should be a string or a list of content blocks"
            )
        return _objects(value, "content_block", "content blocks")


def _objects(value: list[Any], error: str, what: str) -> list[Any]:
    """`value` if each of its items is an object, else the error that says which is not."""
    for index, item in enumerate(value):
        if not isinstance(item, dict):
            raise PydanticCustomError(
                error,
                "Input should be a list of {what} (objects): item {index} is not one",
                {"what": what, "index": index},
            )
    return value


# A recent tool is a tool's name (at most 64 characters); its text joins the query, which
# 50 long strings would have made 240,000 characters long, every one of them logged.
RecentTool = Annotated[str, Field(max_length=MAX_TOOL_NAME)]


class TaskState(Schema):
    plan: str = Field(default="", max_length=8_000, description="The task in progress, in words.")
    recent_tools: list[RecentTool] = Field(
        default_factory=list, max_length=50, description="Tools called recently, newest last."
    )


class SelectRequest(Schema):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "messages": [{"role": "user", "content": "where is my order?"}],
                    "task": {"plan": "help the customer track order 1234", "recent_tools": []},
                    "roles": ["support"],
                    "k": 5,
                    "budget_tokens": 4000,
                    "mode": "hybrid",
                    "format": "anthropic",
                }
            ]
        }
    )

    messages: list[Message] = Field(
        min_length=1,
        description="The conversation: Chat Completions, Anthropic or Gemini messages, or"
        " Responses API input items. A message needs a `role` (a Gemini turn without one is"
        " the user's); an item of another `type` needs none.",
    )
    task: TaskState = Field(default_factory=TaskState)
    roles: list[RoleName] | None = Field(
        default=None, max_length=50, description="Roles to act as; default: all the key's roles."
    )
    # Strict: "2", 2.0 and true are not a k, and "yes" is not a debug flag (lax pydantic
    # would take them); an agent that sends them has a bug it should hear about.
    k: int = Field(
        default=5, ge=1, le=50, strict=True, description="Ranked tools to add beyond core and used."
    )
    budget_tokens: int = Field(default=4000, ge=1, le=200_000, strict=True)
    mode: Mode = Field(
        default="hybrid", description="bm25, dense (embeddings) or hybrid (rank fusion)."
    )
    format: Format = Field(
        default="anthropic",
        description="anthropic, openai (Chat Completions), openai_responses (the Responses"
        " API), mcp, or anthropic_tool_reference (names only, for a tool-search tool's result).",
    )
    debug: bool = Field(default=False, strict=True)


class Candidate(BaseModel):
    name: str
    rank: int
    score: float
    matched_terms: list[str]
    bm25_rank: int | None = None
    dense_rank: int | None = None
    usage_rank: int | None = Field(
        default=None,
        description="hybrid: the tool's rank by the nearest query it was called for (learned"
        " usage); absent for a tool never called for a like query.",
    )
    companion_lift: float | None = Field(
        default=None,
        description="hybrid: what the leading tools it was called together with added to its"
        " score; absent where none did.",
    )
    selected: bool
    reason: str = Field(
        description="core, used (kept from the conversation), selected, over_budget or beyond_k"
    )


class SelectResponse(BaseModel):
    selection_id: UUID
    mode: Mode
    format: Format
    tools: list[dict[str, Any]] = Field(description="Core tools first, then registry order.")
    tokens: int
    budget_tokens: int
    query: str | None = Field(default=None, description="The query that was scored (debug only).")
    steps: int | None = Field(
        default=None,
        description=(
            "dense/hybrid, debug only: the request's steps dense also measured (a query of"
            " four or more sentences, at most 8); absent where it read as one request."
        ),
    )
    candidates: list[Candidate] | None = None
    bm25_coverage: float | None = Field(
        default=None,
        description=(
            "hybrid, debug only: the idf-weighted share of the query's words (those some"
            " tool has) that BM25's first tool contains; BM25's floor in the fusion is scaled"
            " by it."
        ),
    )
    missing_embeddings: int | None = Field(
        default=None,
        description="dense/hybrid: visible live tools without a vector of the served model.",
    )


class AuthorizeRequest(Schema):
    tool: str = Field(min_length=1, max_length=200)
    roles: list[RoleName] | None = Field(default=None, max_length=50)
    arguments: dict[str, Any] | None = Field(
        default=None,
        description=(
            "When given, also checked against the tool's input schema. At most"
            f" {MAX_DEPTH} levels of nesting."
        ),
    )

    @field_validator("arguments")
    @classmethod
    def _bounded(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None and (path := too_deep(value)) is not None:
            raise ValueError(f"values nested more than {MAX_DEPTH} levels deep (at {path})")
        return value


class AuthorizeResponse(BaseModel):
    allowed: bool
    reason: str
    errors: list[str] = Field(default_factory=list)
