"""A deterministic synthetic corpus at benchmark scale, loaded through PostgreSQL ``COPY``.

Why ``COPY`` rather than ``messages_create``: it is the database's cheapest way in (the ORM
path costs about twice the database's own work per message; see the bulk-ingest row of
``bench/benchmark.py``), and the rows can carry their final state directly (ids, times,
deletions, lineage closures) instead of replaying thousands of deletes. Nothing is bypassed,
though: every check constraint, foreign key (immediate and deferred), index, and the
statement-level triggers that write ``message_search_documents`` fire for ``COPY`` exactly as for
``INSERT``, so a loaded corpus is indistinguishable from one ingested through the API
(``rebuild_search_documents --check`` finds nothing to fix). What the services compute in Python
comes from the services' own code: each chunk's seqs are reserved by
``messages_app.services.seqs_reserve`` (``Conversation.last_seq`` and ``live_message_count``,
in the same transaction as the messages they count), and must be the ones the rows carry, so a
gap or a repeat stops the load; lineage is stored as its transitive closure with ``direct``
flags, built by ``services.lineage_sources`` as for an API write; and deletion is left as
``services.message_delete`` leaves it (body erased, ``deleted_at`` set).

Determinism: ids, names, words and times all come from ``random.Random`` instances seeded from
``seed`` and consumed in a fixed order, and times are anchored at ``CORPUS_END`` rather than
now, so the same arguments write the same rows byte for byte (``CorpusReport.digest``), however
many workers load them.

Messages go in time order, in chunks, one transaction each (the database is consistent after
every commit), with ``ANALYZE`` after the first small chunk: foreign-key checks are planned from
table statistics, and against a table the planner believes empty they scan it, which goes
quadratic. A thread generates the next chunk while PostgreSQL ingests the current one, and with
``workers`` > 1 each workspace's share goes to one of several connections (see ``Loaders``):
on two cores the index, trigger and foreign-key work of one backend is what limits the load.

The package, in the order a corpus is made: ``parameters`` (sizes, shares, limits),
``vocabulary`` (the words), ``rows`` (values as COPY text, deterministic ids), ``plan`` (the
world before its messages), ``messages`` (the messages, chunk by chunk), ``loading`` (COPY, the
seq reservation, the generator thread and the loaders) and ``generate`` (``corpus_generate``).
"""

from synthetic.corpus.generate import CorpusProgress, CorpusReport, corpus_generate
from synthetic.corpus.parameters import (
    BUSY_AGENT_CONVERSATIONS,
    BUSY_AGENT_NAME,
    DEFAULT_CHUNK,
    DEFAULT_WORKERS,
    CorpusError,
    workspace_slug,
)
from synthetic.corpus.vocabulary import corpus_vocabulary

__all__ = [
    "BUSY_AGENT_CONVERSATIONS",
    "BUSY_AGENT_NAME",
    "DEFAULT_CHUNK",
    "DEFAULT_WORKERS",
    "CorpusError",
    "CorpusProgress",
    "CorpusReport",
    "corpus_generate",
    "corpus_vocabulary",
    "workspace_slug",
]
