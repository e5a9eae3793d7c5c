"""metagen.strategies."""
