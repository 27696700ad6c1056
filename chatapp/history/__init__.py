"""Conversation history: the SQLite store, its schema and the records it holds."""
