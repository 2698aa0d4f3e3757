"""Errors carry their own status code; one handler renders them all the same way."""

from __future__ import annotations

from typing import Any


class AppError(Exception):
    status_code = 400
    code = "bad_request"
    headers: dict[str, str] | None = None

    def __init__(self, message: str, *, field: str | None = None, **extra: Any) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.extra = extra

    def body(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.field is not None:
            error["field"] = self.field
        error.update(self.extra)
        return {"error": error}


class BadRequest(AppError):
    status_code = 400
    code = "bad_request"


class Unauthenticated(AppError):
    status_code = 401
    code = "unauthenticated"


class NoCredentials(Unauthenticated):
    """No key, or none of the shape a key has: nothing was looked up, so it is no guess at
    one, and not counted against the client's address (a client set up without its key
    would otherwise get its neighbours behind the same address refused)."""


class TenantDeleted(Unauthenticated):
    """The operator deleted the key's tenant while the request ran; its next one gets the
    ordinary 401 of an unknown key."""

    def __init__(self) -> None:
        super().__init__("this key's tenant was deleted")


class Forbidden(AppError):
    status_code = 403
    code = "forbidden"


class NotFound(AppError):
    status_code = 404
    code = "not_found"


class Conflict(AppError):
    status_code = 409
    code = "conflict"


class PayloadTooLarge(AppError):
    status_code = 413
    code = "payload_too_large"


class UnsupportedMediaType(AppError):
    status_code = 415
    code = "unsupported_media_type"


class Unprocessable(AppError):
    status_code = 422
    code = "validation_error"


class RateLimited(AppError):
    status_code = 429
    code = "rate_limited"

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message, retry_after=retry_after)
        self.headers = {"Retry-After": str(retry_after)}


class ServiceUnavailable(AppError):
    status_code = 503
    code = "unavailable"


class Busy(ServiceUnavailable):
    """Work this process takes on only so much of at once; the client retries later."""

    code = "busy"

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message, retry_after=retry_after)
        self.headers = {"Retry-After": str(retry_after)}
