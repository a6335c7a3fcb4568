"""JSON-schema-annotated scalar types, so the OpenAPI documents carry the specs' formats."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

Int32 = Annotated[int, Field(ge=-(2**31), le=2**31 - 1, json_schema_extra={"format": "int32"})]
Int64 = Annotated[int, Field(json_schema_extra={"format": "int64"})]
Float = Annotated[float, Field(json_schema_extra={"format": "float"})]
