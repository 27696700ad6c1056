"""The worker process: the parent's LocalEngine, the child's entry and its pipes."""
