"""metagen.decoding."""
