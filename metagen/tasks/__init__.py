"""metagen.tasks."""
