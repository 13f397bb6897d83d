"""Kafka/Faust adapters around the pure core (see the streaming issue)."""
