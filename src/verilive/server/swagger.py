"""Swagger UI served from a package's bundled assets, so it renders without network access."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse

# fastapi-offline ships Swagger UI 5 (needed for OpenAPI 3.1, which FastAPI emits).
_ASSETS = Path(str(files("fastapi_offline") / "static"))
_ALLOWED = {
    "swagger-ui-bundle.js": "application/javascript",
    "swagger-ui.css": "text/css",
    "favicon.png": "image/png",
}

_INDEX = """<!DOCTYPE html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>{title} - Swagger UI</title>
  <link rel="stylesheet" href="swagger-ui.css">
  <link rel="icon" type="image/png" href="favicon.png">
</head>
<body>
  <div id="swagger-ui"></div>
  <script src="swagger-ui-bundle.js"></script>
  <script>
    // Relative URL so the page also works behind a proxy that adds a path prefix.
    window.ui = SwaggerUIBundle({{
      url: "../openapi.json",
      dom_id: "#swagger-ui",
      deepLinking: true,
      validatorUrl: null
    }});
  </script>
</body>
</html>
"""


def install_swagger(app: FastAPI) -> None:
    index = _INDEX.format(title=app.title)

    @app.get("/swagger-ui/index.html", include_in_schema=False)
    async def swagger_index() -> HTMLResponse:
        return HTMLResponse(index)

    @app.get("/swagger-ui/{asset}", include_in_schema=False, response_model=None)
    async def swagger_asset(asset: str) -> FileResponse | RedirectResponse:
        if asset not in _ALLOWED:
            return RedirectResponse("/swagger-ui/index.html")
        return FileResponse(_ASSETS / asset, media_type=_ALLOWED[asset])

    @app.get("/swagger-ui", include_in_schema=False)
    @app.get("/docs", include_in_schema=False)
    async def swagger_redirect() -> RedirectResponse:
        return RedirectResponse("/swagger-ui/index.html")
