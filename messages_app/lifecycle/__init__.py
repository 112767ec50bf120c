"""The data lifecycle (docs/lifecycle.md), one module per sub-domain:

- ``holds``: legal holds, and the hold lock every erasure and edit takes (``erasure_guard``);
- ``erasure``: erasing messages (what a delete does) and accounts (the right to erasure);
- ``retention``: retention periods and the runs that erase what is older;
- ``exports``: JSON Lines exports, a byte-bounded keyset page at a time (the batch sizes the
  long jobs share are in ``messages_app/limits.py``);
- ``shapes`` and ``views``: the endpoints' request and answer shapes, and the endpoints.

The services import no view or shape; the views call one service each.
"""
