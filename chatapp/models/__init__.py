"""Model files: GGUF headers and validation, fit on this machine, quantize, compare, discovery."""
