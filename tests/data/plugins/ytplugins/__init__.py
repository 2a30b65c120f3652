"""Tiny modules for the registry and import-consent tests; put tests/data/plugins on sys.path to use them."""
