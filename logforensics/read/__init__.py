"""Read: bytes -> physical lines -> records (grammar, fast path) -> events. Knows nothing of the run model."""
