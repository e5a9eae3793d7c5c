"""metagen.engine."""
