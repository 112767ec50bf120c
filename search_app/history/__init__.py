"""search_history's statement: one statement for the whole call, through
``search_app.perspective``, one module a stage in the order they run:

- ``run``: the run's lock and its scope;
- ``terms``: the query's terms, each one's route, and the span the agent's messages lie in;
- ``candidates``: each term's newest eligible matches, read by its route, bounded;
- ``matches``: the candidates scored on their own words (``ranking`` holds SPEC §6's weights
  and the SQL of every score component);
- ``context``: the surroundings of the best candidates, and their scores;
- ``page``: closeness where it matters, the canonical recheck and the hits' neighbours;
- ``spend``: what fits the run's evidence budget;
- ``record``: the evidence rows and the audit event;
- ``answer``: the one result set;
- ``statement``: ``hits_statement``, which composes them and binds their parameters;
- ``read``: ``history_read``, which runs it and reads its rows back by column name;
- ``results``: the filters a search takes and the hits it answers.

The statement is built on every call; a builder that takes no argument depends only on the
models' table names, so it is built once (``functools.cache``) and the call assembles the rest.
"""
