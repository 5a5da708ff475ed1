"""What both the JSON API and the dashboard accept: a want request (and registering it) and paging."""

import asyncio
from typing import Annotated

from fastapi import Query
from pydantic import Field

from databuild.domain.plans import Plan
from databuild.durations import Timestamp, parse_duration
from databuild.models import MAX_INDEX, Model, Want, WantSource
from databuild.web.context import WebContext

Offset = Annotated[int, Query(ge=0, le=MAX_INDEX)]


class WantRequest(Model):
    ref: str
    data_timestamp: Timestamp | None = Field(
        default=None, description="default: the date in the ref, else today"
    )
    sla: str | None = Field(default=None, description="e.g. 9h, counted from data_timestamp")
    ttl: str | None = Field(default=None, description="e.g. 30d, counted from data_timestamp")
    requires: list[str] = Field(
        default=[],
        max_length=100,
        description="external partitions that must be available before the job runs",
    )
    fresh: bool = Field(
        default=False, description="if the partition is live but stale, rebuild it and its stale inputs"
    )


async def plan_want(ctx: WebContext, request: WantRequest) -> Plan:
    """Check the request and plan the want; records nothing."""
    async with ctx.planning():
        return await ctx.db.plan(
            request.ref,
            data_timestamp=request.data_timestamp,
            sla=parse_duration(request.sla) if request.sla else None,
            ttl=parse_duration(request.ttl) if request.ttl else None,
            requires=request.requires,
            fresh=request.fresh,
        )


async def register_want(ctx: WebContext, request: WantRequest, source: WantSource) -> Want:
    """Check the request, register the want (idempotently) and return it as recorded."""
    sla = parse_duration(request.sla) if request.sla else None
    ttl = parse_duration(request.ttl) if request.ttl else None
    spec = await ctx.db.want(
        request.ref,
        data_timestamp=request.data_timestamp,
        sla=sla,
        ttl=ttl,
        source=source,
        requires=request.requires,
        fresh=request.fresh,
    )
    return await asyncio.to_thread(ctx.bel.wants.get, spec.want_id)
