"""search_history's hits statement: one statement for the ranked hits, their neighbours, their
highlights and the audit's exclusion counts, all through ``search_app.perspective``.

Its modules follow the statement's plan, one builder function per CTE:

- ``ranking``: SPEC §6, the weights and the SQL of every score component;
- ``matches``: the projection read once (``matches``, ``excluded``, ``match_speakers``,
  ``weights``, ``partial``);
- ``context``: the surroundings of the best matches (``pool``, ``windows``, ``window_words``,
  ``receivers``) and the scored ``candidates``;
- ``page``: closeness where it matters (``leaders``, ``floor``, ``contenders``, ``ranked``),
  the canonical recheck (``page``), the hits' neighbours (``nearby``) and the one result set;
- ``statement``: ``hits_statement``, which composes them and binds their parameters;
- ``read``: ``history_read``, which runs it and reads its rows back by column name;
- ``results``: the filters a search takes and the hits it answers.

The statement is built on every call; a builder that takes no argument depends only on the
models' table names, so it is built once (``functools.cache``) and the call assembles the rest.
"""
