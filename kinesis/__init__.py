"""A pure-Python Kinesis consumer with a balanced, fenced DynamoDB lease loop."""

from kinesis.errors import ConfigurationError, KinesisHashRingError, LeaseLostError

__all__ = ["ConfigurationError", "KinesisHashRingError", "LeaseLostError"]
