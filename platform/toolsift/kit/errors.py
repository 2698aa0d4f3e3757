"""The error body every endpoint documents."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class FieldProblem(BaseModel):
    field: str
    message: str
    type: str


class ErrorDetail(BaseModel):
    code: str
    message: str
    field: str | None = None
    errors: list[FieldProblem] | None = Field(
        default=None, description="422: every problem found, the first one also in `field`."
    )
    retry_after: int | None = Field(default=None, description="429: seconds to wait.")


class ErrorBody(BaseModel):
    error: ErrorDetail


ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": description}
    for status, description in {
        400: "The body is not JSON, or a query parameter the route does not take",
        401: "Missing, malformed or revoked API key",
        403: "The key may not do this",
        404: "Not found (or not yours)",
        409: "Conflicts with existing state",
        413: "Request body too large",
        415: "The body is not sent as application/json",
        422: "Invalid input; `field` names the offending field",
        429: "Too many requests for this key, or too many failed authentications from this"
        " address; retry after `Retry-After` seconds",
        503: "A dependency (the database) is unavailable, or the transaction lost a deadlock;"
        " retry",
    }.items()
}
