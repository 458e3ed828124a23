"""Dependencies: settings, the store, the session service and the requester (owner), from the app and the
request being served."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import Depends, Query, Request

from gradserve_server.app.config import Settings
from gradserve_server.app.service import SessionService
from gradserve_server.app.store import SessionStore


def get_settings(request: Request) -> Settings:
    return request.app.state.settings


def get_store(request: Request) -> SessionStore:
    return request.app.state.store


def get_service(request: Request) -> SessionService:
    return request.app.state.service


def get_owner(request: Request) -> str:
    """The digest of the request's API key, set by ``app.auth.Auth`` (``""`` on an open server)."""
    return request.state.owner


def get_client(request: Request) -> str:
    """The request's client address, set by ``app.auth.Auth`` (for the per-address session quota)."""
    return request.state.client


async def get_body(request: Request) -> bytes:
    """The raw body, read on the event loop; parsing happens in the route's thread."""
    return await request.body()


SettingsDep = Annotated[Settings, Depends(get_settings)]
StoreDep = Annotated[SessionStore, Depends(get_store)]
ServiceDep = Annotated[SessionService, Depends(get_service)]
OwnerDep = Annotated[str, Depends(get_owner)]
ClientDep = Annotated[str, Depends(get_client)]
RawBody = Annotated[bytes, Depends(get_body)]
EncodingQuery = Annotated[Literal["json", "base64"], Query(
    description="How tensor data is written in the response: JSON numbers/lists (NaN and infinities as "
                "the strings \"NaN\", \"Infinity\", \"-Infinity\") or base64 objects.")]
