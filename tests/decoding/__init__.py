"""Tests of metagen.decoding (a package, so that helpers import relatively)."""
