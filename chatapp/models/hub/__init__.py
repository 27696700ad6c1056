"""Models from the Hugging Face Hub: list a repo's GGUF files, choose a quant, pull it into the
standard Hugging Face cache (resumable, sha256-checked), and search the Hub."""
