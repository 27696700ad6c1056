"""The GGUF files other tools keep: the Hugging Face cache, Ollama, LM Studio, llama.cpp."""
