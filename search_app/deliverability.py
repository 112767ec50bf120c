"""The membership tools under a run's perspective: what list_messages, get_message and
search_messages show a run's token (SPEC §3 for the run's destination; issue "runs that cannot
be poisoned").

A run token's membership tools read what membership allows, and every message they return
carries ``deliverable``: whether a reply citing it would pass the final delivery check now
(rules 1 to 4, exactly the check's own fragment), so an agent or runtime can stop before it
reads what would block its reply. A run created with ``toolScope: deliverable`` is shown only
what search_history could return (rules 1 to 5): withheld messages are absent, totals exclude
them, an anchor or message it may not receive is ``not_found``, and a reference to one is
null. Either way the fragments come from ``perspective`` and are evaluated in the tool's own
statement (``messages_app.lens.RunLens``, put on the call by
``runs.services.tool_call``); nothing is filtered in Python.
"""

from __future__ import annotations

from messages_app.lens import RunLens
from search_app.perspective import eligible_condition, receivable_reference, scope_ctes
from search_app.scope import Perspective


def run_lens(perspective: Perspective, *, strict: bool) -> RunLens:
    """The run's perspective as the membership tools' statements apply it."""
    return RunLens(
        ctes=scope_ctes(),
        params=perspective.params(),
        deliverable=lambda alias: eligible_condition(alias, prompt_rule=False),
        visible=lambda alias: eligible_condition(alias),
        reference=receivable_reference,
        strict=strict,
    )
