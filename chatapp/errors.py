"""The one family of errors chatapp raises: each says what is wrong and what to do."""
