"""``GET /api/v1/runs/{id}/trace``: what the run's searches did, for the runtime or the run."""

from __future__ import annotations

import uuid

from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from audit_app import selectors
from audit_app.serializers import search_audit_item
from formation.auth import IsServiceOrRunToken
from formation.fields import query_params
from messages_app.serializers import ListPageQuery


class RunTraceView(APIView):
    permission_classes = [IsServiceOrRunToken]

    def get(self, request: Request, run_id: uuid.UUID) -> Response:
        page = query_params(request, ListPageQuery)
        limit, offset = page["limit"], page["offset"]
        events = selectors.run_search_events(caller=request.user, run_id=run_id)
        items = list(events[offset : offset + limit])
        total = len(items) if offset == 0 and len(items) < limit else events.count()
        with_exclusions = request.user.is_service
        return Response(
            {
                "items": [search_audit_item(e, with_exclusions=with_exclusions) for e in items],
                "total": total,
                "limit": limit,
                "offset": offset,
            }
        )
