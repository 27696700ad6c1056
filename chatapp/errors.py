"""The one family of errors chatapp raises: each says what is wrong and what to do.

This module is the bottom of the house: it imports nothing from chatapp, so every layer can
raise and catch these. The other error classes (EngineError, StoreError, SettingsError, ...)
live beside the code that raises them and subclass ChatappError.
"""

from __future__ import annotations


class ChatappError(Exception):
    """Something the user can fix; str() is one plain sentence saying what is wrong and
    what to do. The command line prints it as one `error:` line and exits 1."""


class UsageError(ChatappError):
    """Bad flags or options that conflict; the command line exits 2, like a click usage
    error."""


class ModelFileError(ChatappError):
    """A file (or a folder of them) that is not a usable GGUF model: missing, unreadable,
    not GGUF, truncated, a header llama.cpp would refuse, or no place to write a copy."""


class HubError(ChatappError):
    """The Hugging Face Hub could not give what was asked: no such repo or file, no access,
    no network, a download that failed or did not match its checksum."""
