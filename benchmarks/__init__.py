"""Quality and speed harnesses that drive the public ``vault_search`` API."""
