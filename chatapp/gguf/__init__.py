"""GGUF files read without llama.cpp: the header reader and its tables (the bottom layer)."""
