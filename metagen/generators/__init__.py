"""metagen.generators."""
