"""The generic lease loop: fenced DynamoDB leases placed on a hash ring, peer to peer.

Nothing here knows about Kinesis records: keys are opaque strings and checkpoints ordered
values. ``kinesis.consumer`` builds the Kinesis consumer on top of it.
"""
