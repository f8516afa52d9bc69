"""``GET /``: the small web page (static files under ``/static``)."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse

router = APIRouter(include_in_schema=False)

INDEX = Path(__file__).resolve().parent.parent / "static" / "index.html"


@router.get("/")
async def index() -> FileResponse:
    return FileResponse(INDEX, media_type="text/html")
