"""Inside the model in the worker: the inspector's captures and the steering vectors."""
