"""The files of the long demo session's repository, as the agent first reads them (data)."""

from __future__ import annotations

API = "src/payments/api/refunds.py"
STORE = "src/payments/workers/idempotency.py"
WORKER = "src/payments/workers/refunds.py"
CLEANUP = "src/payments/workers/cleanup.py"
CONFIG = "src/payments/config.py"
DB = "src/payments/db.py"
TESTS = "tests/api/test_refunds.py"
MIGRATION = "migrations/0042_idempotency_keys.py"
API_DOCS = "docs/api/refunds.md"
CHANGELOG = "CHANGELOG.md"

FILES: dict[str, str] = {
    API: '''\
"""Refunds API: create, fetch and list refunds of a captured payment."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from fastapi import APIRouter, Depends, HTTPException

from payments.db import Session, get_session
from payments.ledger.writer import LedgerWriter
from payments.money import Cents
from payments.models import Payment, Refund

router = APIRouter(prefix="/refunds", tags=["refunds"])
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RefundRequest:
    payment_id: str
    amount_cents: int
    reason: str | None = None


@dataclass(frozen=True)
class RefundResponse:
    id: str
    payment_id: str
    amount_cents: int
    status: str


def _to_response(refund: Refund) -> RefundResponse:
    return RefundResponse(refund.id, refund.payment_id, refund.amount_cents, refund.status.value)


@router.post("", status_code=201)
def create_refund(body: RefundRequest, session: Session = Depends(get_session)) -> RefundResponse:
    """Refund part or all of a captured payment; the ledger entry is written in the same transaction."""
    payment = session.get(Payment, body.payment_id)
    if payment is None:
        raise HTTPException(404, f"payment {body.payment_id} not found")
    amount = Cents(body.amount_cents)
    if amount <= 0 or amount > payment.refundable_cents:
        raise HTTPException(422, f"amount must be between 1 and {payment.refundable_cents} cents")
    refund = Refund.new(payment_id=payment.id, amount_cents=int(amount), reason=body.reason)
    with session.begin():
        session.add(refund)
        LedgerWriter(session).refund(payment, amount, refund_id=refund.id)
    logger.info("refund %s created for payment %s (%s cents)", refund.id, payment.id, int(amount))
    return _to_response(refund)


@router.get("/{refund_id}")
def get_refund(refund_id: str, session: Session = Depends(get_session)) -> RefundResponse:
    refund = session.get(Refund, refund_id)
    if refund is None:
        raise HTTPException(404, f"refund {refund_id} not found")
    return _to_response(refund)


@router.get("")
def list_refunds(payment_id: str, session: Session = Depends(get_session)) -> list[RefundResponse]:
    rows = session.query(Refund).filter_by(payment_id=payment_id).order_by(Refund.created_at)
    return [_to_response(r) for r in rows]
''',
    STORE: '''\
"""Idempotency keys for the payout worker: claim a key before acting, store the response after."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from payments.db import Session
from payments.models import IdempotencyKey


class KeyConflict(Exception):
    """The key's first request is still running, or the key was used with another request."""


@dataclass(frozen=True)
class Claim:
    key: str
    response: dict | None  # the stored response of a completed earlier request


class IdempotencyStore:
    """Rows of idempotency_keys, unique on (scope, key)."""

    def __init__(self, session: Session, *, scope: str) -> None:
        self.session = session
        self.scope = scope

    def claim(self, key: str, *, ttl_seconds: int) -> Claim:
        """Insert the key, or return the completed response stored under it.

        Raises IntegrityError when another transaction inserts the same key first.
        """
        row = self.session.get(IdempotencyKey, (self.scope, key))
        now = datetime.now(timezone.utc)
        if row is not None and row.expires_at > now:
            if row.response_json is None:
                raise KeyConflict(f"{self.scope}:{key} is still in progress")
            return Claim(key, json.loads(row.response_json))
        expires = now + timedelta(seconds=ttl_seconds)
        self.session.add(IdempotencyKey(scope=self.scope, key=key, expires_at=expires))
        self.session.flush()
        return Claim(key, None)

    def complete(self, key: str, response: dict) -> None:
        row = self.session.get(IdempotencyKey, (self.scope, key))
        row.response_json = json.dumps(response, sort_keys=True)
''',
    WORKER: '''\
"""Refund worker: retries refunds that the bank did not confirm within the API request."""

from __future__ import annotations

import logging

from payments.clients.bank import BankClient, BankTimeout
from payments.db import session_scope
from payments.ledger.writer import LedgerWriter
from payments.models import Refund, RefundStatus
from payments.retry import backoff

logger = logging.getLogger(__name__)


def retry_pending_refunds(bank: BankClient, *, batch_size: int = 100) -> int:
    """Send every refund still pending to the bank; returns how many were confirmed."""
    confirmed = 0
    with session_scope() as session:
        pending = session.query(Refund).filter_by(status=RefundStatus.PENDING).limit(batch_size)
        for refund in pending:
            for attempt in backoff(3, base=0.2):
                try:
                    bank.refund(refund.payment_id, refund.amount_cents, reference=refund.id)
                    break
                except BankTimeout:
                    logger.info("refund %s: bank timeout (attempt %s)", refund.id, attempt)
            else:
                continue
            refund.status = RefundStatus.CONFIRMED
            LedgerWriter(session).confirm_refund(refund)
            confirmed += 1
    return confirmed
''',
    CLEANUP: '''\
"""Nightly cleanup: expired sessions and stale export files."""

from __future__ import annotations

import logging
from datetime import datetime, timezone

from payments.db import session_scope

logger = logging.getLogger(__name__)


def run_cleanup() -> dict[str, int]:
    now = datetime.now(timezone.utc)
    with session_scope() as session:
        sessions = session.execute("DELETE FROM api_sessions WHERE expires_at < :now", {"now": now}).rowcount
        exports = session.execute("DELETE FROM export_files WHERE expires_at < :now", {"now": now}).rowcount
    logger.info("cleanup: %s sessions, %s export files", sessions, exports)
    return {"api_sessions": sessions, "export_files": exports}
''',
    CONFIG: '''\
"""Settings read from the environment (PAYMENTS_*), with defaults for local runs."""

from __future__ import annotations

from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PAYMENTS_")

    database_url: str = "postgresql+psycopg://payments@localhost/payments"
    bank_base_url: str = "https://bank.sandbox.example"
    bank_timeout_seconds: float = 10.0
    ledger_sync_interval_seconds: int = 30
    export_ttl_hours: int = 72


settings = Settings()
''',
    DB: '''\
"""Database engine and sessions."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session, sessionmaker

from payments.config import settings

engine = create_engine(settings.database_url, pool_pre_ping=True, connect_args={"options": "-c statement_timeout=15000"})
SessionLocal = sessionmaker(engine, expire_on_commit=False)


def get_session() -> Iterator[Session]:
    with SessionLocal() as session:
        yield session


@contextmanager
def session_scope() -> Iterator[Session]:
    with SessionLocal.begin() as session:
        yield session


def set_lock_timeout(session: Session, milliseconds: int) -> None:
    session.execute(text(f"SET LOCAL lock_timeout = {int(milliseconds)}"))
''',
    TESTS: '''\
"""POST/GET /refunds against a real postgres (see conftest.py)."""

import pytest


def refund(client, payment, amount=500, **headers):
    return client.post("/refunds", json={"payment_id": payment.id, "amount_cents": amount}, headers=headers)


def test_create_refund_returns_201(client, captured_payment):
    response = refund(client, captured_payment)
    assert response.status_code == 201
    assert response.json()["status"] == "pending"


def test_create_refund_writes_ledger_entry(client, captured_payment, ledger):
    response = refund(client, captured_payment)
    assert ledger.entries_for(response.json()["id"]) == [("refund", -500)]


def test_refund_of_unknown_payment_is_404(client):
    response = client.post("/refunds", json={"payment_id": "pay_missing", "amount_cents": 100})
    assert response.status_code == 404


@pytest.mark.parametrize("amount", [0, -1, 10_001])
def test_refund_amount_out_of_range_is_422(client, captured_payment, amount):
    assert refund(client, captured_payment, amount).status_code == 422


def test_partial_refunds_add_up(client, captured_payment):
    refund(client, captured_payment, 4_000)
    refund(client, captured_payment, 6_000)
    assert refund(client, captured_payment, 1).status_code == 422


def test_get_refund(client, captured_payment):
    created = refund(client, captured_payment).json()
    assert client.get(f"/refunds/{created['id']}").json() == created


def test_get_unknown_refund_is_404(client):
    assert client.get("/refunds/re_missing").status_code == 404


def test_list_refunds_in_creation_order(client, captured_payment):
    ids = [refund(client, captured_payment, 100).json()["id"] for _ in range(3)]
    listed = client.get("/refunds", params={"payment_id": captured_payment.id}).json()
    assert [r["id"] for r in listed] == ids


def test_list_refunds_of_payment_without_refunds(client, captured_payment):
    assert client.get("/refunds", params={"payment_id": captured_payment.id}).json() == []


def test_refund_amounts_are_integer_cents(client, captured_payment):
    assert isinstance(refund(client, captured_payment, 250).json()["amount_cents"], int)


def test_full_refund_leaves_nothing_refundable(client, captured_payment):
    assert refund(client, captured_payment, 10_000).status_code == 201
    assert refund(client, captured_payment, 1).status_code == 422


def test_refund_reason_is_optional(client, captured_payment):
    assert refund(client, captured_payment).status_code == 201
''',
    MIGRATION: '''\
"""idempotency_keys: one row per (scope, key); the payout worker's request log."""

revision = "0042"
down_revision = "0041"


def upgrade(op, sa):
    op.create_table(
        "idempotency_keys",
        sa.Column("scope", sa.String(32), primary_key=True),
        sa.Column("key", sa.String(255), primary_key=True),
        sa.Column("response_json", sa.Text, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now()),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade(op, sa):
    op.drop_table("idempotency_keys")
''',
    API_DOCS: """\
# Refunds

`POST /refunds` refunds part or all of a captured payment.

| field | type | |
|---|---|---|
| payment_id | string | the captured payment |
| amount_cents | integer | 1 ... refundable amount, in cents |
| reason | string | optional, shown on the statement |

Responses: `201` with the refund, `404` unknown payment, `422` amount out of range.

`GET /refunds/{id}` returns one refund; `GET /refunds?payment_id=...` lists a payment's refunds.
""",
    CHANGELOG: """\
# Changelog

## Unreleased

### Fixed
- Ledger sync retries are bounded with backoff (#512).

## 2025.03.1

### Added
- Partial refunds.
""",
}

#: Modules of the demo's generated repository the agent reads, by size in bytes (read_file makes
#: up their contents; the conftest is larger than the offload threshold, so it is stored).
GENERATED = {
    "src/payments/ledger/writer.py": 9_000,
    "src/payments/models.py": 8_000,
    "src/payments/workers/payouts.py": 8_500,
    "src/payments/clients/webhooks.py": 6_000,
    "tests/conftest.py": 18_000,
    "tests/workers/test_payout_retry.py": 6_500,
    "tests/workers/test_refunds_worker.py": 5_000,
    "tests/workers/test_cleanup.py": 4_000,
}
