"""Loading a model in the worker: llama.cpp's open, the fallbacks, the tune, the template."""
