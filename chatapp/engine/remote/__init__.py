"""The remote engine: an OpenAI-compatible server (llama-server, vLLM, Ollama) over HTTP."""
