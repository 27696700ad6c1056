"""A chat session without Textual: messages, context fitting and the reply's life."""
