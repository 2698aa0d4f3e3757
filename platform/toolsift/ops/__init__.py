"""Running in production: structured logs, request ids, metrics, readiness."""
