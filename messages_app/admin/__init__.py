"""Django admin for trusted administrators: browse everything, write little.

One module per sub-domain, each registering its models: ``workspaces`` (workspaces and the base
of every workspace-scoped page), ``accounts`` (accounts, agents, identity links),
``conversations`` (conversations and their members), ``transcript`` (a conversation read top to
bottom, and links to it), ``messages``, ``holds`` and ``tokens``. Their columns, filters, paging
and read-only bases are ``formation/admin_kit.py``; runs are browsed beside their logic
(``search_app/runs/admin.py``), the audit records beside theirs (``audit_app/admin.py``).
Django's autodiscovery imports this package, so it imports every module that registers a model.

Security invariant: no admin page renders the body of a deleted message. Message bodies reach
HTML only through ``message_body``, ``content_preview`` and the conversation transcript
(``transcript_page``): the first two answer "(deleted)" and the transcript's line holds no text
for a deleted message, whatever the row holds. The token digest is never listed in any
``fields``.

Writes that must keep search, audit or proofs in step (messages, memberships, identity-link
status, runs, tokens) go through the API services, so those models are read-only here. Pages stay
fast on a million messages: related rows are joined (``list_select_related``), the changelist of
messages keeps the ``(conversation, seq)`` index order, counts at most ``CappedCountPaginator.CAP``
rows, shows no facets, and a search term that is a UUID becomes an indexed exact match instead
of a text scan. Foreign-key filters pick one row through the autocomplete
(``AutocompleteListFilter``) instead of listing the related table, and the transcript pages by
seq range. Rows are named ("<conversation title> #<seq>", "<member> in <conversation>"), lists
keep to columns that fit a 1280 px window (``messages_app/static/messages_app/admin.css``).
"""

from messages_app.admin import (  # noqa: F401  (each registers its models)
    accounts,
    conversations,
    holds,
    messages,
    tokens,
    workspaces,
)
