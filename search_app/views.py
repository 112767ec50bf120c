"""search_history over HTTP: a run token, a JSON body, one service call."""

from __future__ import annotations

from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from formation.auth import IsRunToken
from formation.fields import check_query_keys
from search_app import services
from search_app.serializers import SearchHistorySerializer, search_history_body


class SearchHistoryView(APIView):
    """``POST /api/v1/history/search``: perspective-safe, ranked full-text search."""

    permission_classes = [IsRunToken]

    def post(self, request: Request) -> Response:
        check_query_keys(request, allowed=set())
        serializer = SearchHistorySerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        result = services.search_history(
            workspace_id=request.user.workspace_id,
            run_id=request.user.run_id,
            query_text=serializer.validated_data["query"],
            filters=serializer.history_filters(),
            limit=serializer.hit_limit(),
        )
        return Response(search_history_body(result))
