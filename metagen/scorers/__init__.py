"""metagen.scorers."""
