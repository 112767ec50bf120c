"""A run's one home: its life, its reads and its admin pages.

A run is one turn of an agent in a destination conversation for a requester (SPEC §4).
``services`` writes everything that changes a run's state (create, lock, evidence, reply,
finish), ``selectors`` reads it (what its model has seen, its status, its trace), and ``admin``
browses it; the ``runs…`` routes are this app's (``search_app/urls.py``).

The tables, ``Run`` and ``RunEvidence``, stay ``messages_app`` models (``messages_app/models/
runs.py``), since the token table and the lineage point at them: moving a table between apps
is a migration that changes no behaviour, so the rows stay where they are and the code that
gives them meaning lives here.
"""
