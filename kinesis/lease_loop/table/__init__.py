"""The lease table: every row the lease loop keeps in DynamoDB, and every call on it.

* :mod:`.leases`: :class:`~.leases.LeaseTable`, the facade (every write conditional on what the
  writer last saw: the fenced writes), and setting the table up;
* :mod:`.rules`: what each write sets and on what condition (pure);
* :mod:`.calls`: one DynamoDB call: retries, named errors, idempotent conditional writes;
* :mod:`.reads`: scans, batched reads by key, and the corrupt rows they meet;
* :mod:`.model`: the row formats (leases, session and member rows) and how they parse;
* :mod:`.sessions`: session rows (one per running member) and membership heartbeat rows;
* :mod:`.manifests`: versioned documents (the published plan, shard manifests, member lists).
"""
