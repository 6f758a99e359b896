"""Operator configuration: the keys every mode reads (`local.toml` for Local), their
defaults from the protocol's limits, and the strict value syntax."""
