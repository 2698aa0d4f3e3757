from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.exc import ProgrammingError
from sqlalchemy.orm import Session

from ..access.schemas import KeyCreate, KeyCreated
from ..access.service import access
from ..db import ALL_PERMISSIONS, OBSERVER_ROLE, as_observer, set_permissions, set_tenant
from ..errors import NotFound, ServiceUnavailable, TenantDeleted, Unprocessable
from ..kit.pagination import KeysetCursor
from ..lexical.analysis import TEXT_SEARCH_CONFIG, text_search
from ..lexical.index import reanalyse_catalog
from ..models import Tenant
from ..security.audit import lock_chain
from ..selection.dense import Fusion
from .schemas import (
    TenantCreate,
    TenantCreated,
    TenantPage,
    TenantRead,
    TenantSummary,
    TenantUpdate,
)


@dataclass(frozen=True)
class UpdatedTenant:
    tenant: Tenant
    # The text search configuration the catalog was indexed again with, if the change chose
    # another one (`lexical.analysis.text_search`).
    reindexed_with: str | None = None


@dataclass(frozen=True)
class DeletedTenant:
    name: str
    tools: int
    keys: int
    analyst_login: bool


# MCP sources go first: their foreign keys to permissions are RESTRICT (a permission in use
# by a source may not be deleted), and the tenant's cascade would reach both in no set order.
_DELETE_SOURCES = text("DELETE FROM mcp_sources WHERE tenant_id = :t")
_TEXT_SEARCH = text("SELECT public.toolsift_text_search(:t, CAST(:default AS regconfig))::text")
_COUNTS = text(
    "SELECT (SELECT count(*) FROM tools WHERE tenant_id = :t AND deleted_at IS NULL) AS tools,"
    " (SELECT count(*) FROM api_keys WHERE tenant_id = :t AND revoked_at IS NULL) AS keys"
)

_LIST = text(
    """
    SELECT t.id, t.name, t.created_at,
           (SELECT count(*) FROM tools WHERE tenant_id = t.id AND deleted_at IS NULL) AS tools
    FROM tenants t
    WHERE CAST(:after_id AS uuid) IS NULL
       OR (t.created_at, t.id) > (CAST(:after_at AS timestamptz), CAST(:after_id AS uuid))
    ORDER BY t.created_at, t.id
    LIMIT :limit
    """
)
# Where a page ended, by value: it stays valid if that tenant is deleted meanwhile.
CURSOR = KeysetCursor(b"t", field="after", legacy_separator="_")


class TenantService:
    def create(self, session: Session, data: TenantCreate, *, pepper: str) -> TenantCreated:
        """A new tenant with its first admin key; RLS checks the insert against the new id."""
        tenant_id = uuid.uuid4()
        set_tenant(session, tenant_id)
        set_permissions(session, ALL_PERMISSIONS)
        tenant = Tenant(id=tenant_id, name=data.name, settings={}, next_position=0)
        session.add(tenant)
        session.flush()
        key = access.create_key(
            session, tenant_id, KeyCreate(name="bootstrap admin", scope="admin"), pepper=pepper
        )
        return TenantCreated(
            tenant=TenantRead.model_validate(tenant),
            admin_key=KeyCreated.model_validate(key, from_attributes=True),
        )

    def list_all(self, session: Session, *, limit: int, after: str | None) -> TenantPage:
        """Every tenant, oldest first: the operator's view, read as the observer role (with
        every permission, or the restrictive permission policy would hide tools from it)."""
        after_at, after_id = CURSOR.read(after) if after is not None else (None, None)
        set_permissions(session, ALL_PERMISSIONS)
        try:
            as_observer(session)
        except ProgrammingError as error:
            raise ServiceUnavailable(
                f"listing tenants needs the database login to be a member of {OBSERVER_ROLE}"
                " (the login that ran the migrations is)"
            ) from error
        rows, cursor = CURSOR.page(
            session.execute(
                _LIST, {"after_at": after_at, "after_id": after_id, "limit": limit + 1}
            ).all(),
            limit,
        )
        items = [TenantSummary.model_validate(row, from_attributes=True) for row in rows]
        return TenantPage(items=items, next_cursor=cursor)

    def get(self, session: Session, *, for_write: bool = False) -> Tenant:
        """`for_write`: after the tenant's admin writers before it, so a settings merge
        starts from what they committed instead of overwriting it."""
        if for_write:
            lock_chain(session)
        tenant = session.get(Tenant, session.info["tenant_id"], populate_existing=for_write)
        if tenant is None:
            raise TenantDeleted()
        return tenant

    def delete(self, session: Session) -> DeletedTenant:
        """Remove the session's tenant and everything it owns, in this one transaction.

        Its rows go by the foreign keys' cascades (tools, index, vectors, outbox, keys, roles,
        logs); its analyst login is dropped. Its audit entries stay, ending with this delete:
        they hold keys and hashes, no content, and are what shows who removed the tenant.
        """
        # The audit chain's lock before the tenant row, the order every admin write takes
        # them in (the chain first, then the row, by its foreign key): the other order
        # deadlocked against concurrent writes.
        lock_chain(session)
        tenant = session.get(Tenant, session.info["tenant_id"], with_for_update=True)
        if tenant is None:
            raise NotFound(f"no tenant {session.info['tenant_id']}", field="tenant_id")
        counts = session.execute(_COUNTS, {"t": tenant.id}).one()
        analyst = bool(session.scalar(text("SELECT analytics.drop_analyst_login()")))
        session.execute(_DELETE_SOURCES, {"t": tenant.id})
        session.delete(tenant)
        session.flush()
        return DeletedTenant(
            name=tenant.name, tools=counts.tools, keys=counts.keys, analyst_login=analyst
        )

    def update(self, session: Session, data: TenantUpdate) -> UpdatedTenant:
        tenant = self.get(session, for_write=True)
        analysed_with = text_search(tenant.settings)
        if data.name is not None:
            tenant.name = data.name
        if data.settings is not None:
            settings = merged(tenant.settings, data.settings.model_dump(exclude_unset=True))
            _check_fusion(settings.get("fusion"))
            tenant.settings = settings
        session.flush()
        if (chosen := text_search(tenant.settings)) != analysed_with:
            _check_text_search(session, tenant.id, chosen)
            # Selects analyse with the new configuration once this commits: so must the
            # postings they read (`lexical/sql/toolsift_text_search.sql`).
            reanalyse_catalog(session, tenant.id)
            return UpdatedTenant(tenant, reindexed_with=chosen)
        return UpdatedTenant(tenant)


def _check_text_search(session: Session, tenant_id: uuid.UUID, chosen: str) -> None:
    """What the database reads for the stored setting must be the configuration chosen: a
    server of another version may lack one the API knows, and would read the default."""
    read = session.scalar(_TEXT_SEARCH, {"t": tenant_id, "default": TEXT_SEARCH_CONFIG})
    if read == chosen:
        return
    # The language the server lacks, else the twin that folds its accents (0037's).
    language = chosen.rpartition(".")[2]
    field = "text_search" if language != str(read).rpartition(".")[2] else "unaccent"
    raise Unprocessable(
        f"{chosen!r}: this PostgreSQL server has no such text search configuration",
        field=f"settings.{field}",
    )


def _check_fusion(fusion: Any) -> None:
    """What each value allows alone, the merged pair may still not: with both weights 0 a
    hybrid select scores every tool 0 and answers in registry order."""
    if not isinstance(fusion, dict):
        return
    weights = [fusion.get(w) for w in ("bm25_weight", "dense_weight")]
    defaults = (Fusion.bm25_weight, Fusion.dense_weight)
    if all((w if w is not None else d) == 0 for w, d in zip(weights, defaults, strict=True)):
        raise Unprocessable(
            "bm25_weight and dense_weight cannot both be 0 (hybrid selects would rank nothing)",
            field="settings.fusion",
        )


def merged(current: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """Key by key, at every depth: `{"fusion": {"k": 30}}` keeps the other fusion settings,
    and a null removes its key (a JSON merge patch, RFC 7396), so that a setting written
    under a misspelt name can be taken out again."""
    result = dict(current)
    for key, value in given.items():
        old = result.get(key)
        if value is None:
            result.pop(key, None)
        elif isinstance(old, dict) and isinstance(value, dict):
            result[key] = merged(old, value)
        else:
            result[key] = value
    return result


tenant = TenantService()
