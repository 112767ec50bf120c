"""A search_history query: user text parsed into a safe OR query (``parse.py``), the scripts
written without spaces (``cjk.py``), and the matched words found for highlighting
(``highlights.py``).

The query syntax (SPEC §6), and nothing else:

- words are alternatives (OR): each word the configuration keeps (stop words and punctuation
  are dropped) is one term;
- a double-quoted group is one term, its words adjacent and in order (``"release train"``); a
  quote without a partner is an ordinary character;
- a word of at least ``MIN_PREFIX`` letters or digits followed by ``*`` matches by prefix
  (``releas*``), inside a group too;
- a run of Han, kana or Hangul characters (scripts written without spaces) is one term that
  matches that text anywhere inside a sentence, through the character bigrams its documents
  carry: ``移行`` finds "来週のデータベース移行について".

Raw user text never reaches ``to_tsquery``: PostgreSQL itself splits and normalises every part
with ``formation_search_document``, the function the documents are built with (the workspace's
configuration, bigrams for CJK), and we assemble the lexemes into a ``tsquery`` literal with
every lexeme quoted, so nothing the user types acts as an operator. ``plainto_tsquery`` and
``websearch_to_tsquery`` would AND the words; SPEC §6 makes them alternatives.
"""
