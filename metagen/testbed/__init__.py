"""metagen.testbed."""
