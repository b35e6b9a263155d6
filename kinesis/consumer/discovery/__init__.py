"""Which shards exist and which are ready: ListShards and lineage (:mod:`.shards`), the
Worker's resource provider (:mod:`.sync`), and shard discovery as one member's chore under
scoped reads (:mod:`.manifest`).
"""
