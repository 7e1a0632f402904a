"""Kafka wire-protocol front end for kafkaesque (asyncio)."""
