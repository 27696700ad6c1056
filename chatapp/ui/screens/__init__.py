"""Modal screens: help, system prompt, confirmations."""
