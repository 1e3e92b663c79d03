"""Scale: a suite run split into shards (``--shard K/N``), the shards' reports
merged into the single run's (``devicekit report merge``), and an optional
runner that places the shards on a Ray cluster (``devicekit ray``). DeviceKit
writes no scheduler: Ray, or any CI matrix, runs the shards (docs/scale.md).
"""
