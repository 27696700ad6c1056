"""chatapp: run GGUF models locally in the terminal and see what they do."""

__version__ = "0.1.0"
