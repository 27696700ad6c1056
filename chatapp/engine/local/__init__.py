"""The local engine: llama.cpp in a child process, its token loop and the CPU/GPU fallbacks."""
