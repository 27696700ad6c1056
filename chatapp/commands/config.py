"""`chatapp config ...`: where the config file is and what it says, printed."""

from __future__ import annotations

import sys

from chatapp import paths
from chatapp.config import load_config
from chatapp.config_state import state_file
from chatapp.config_toml import to_toml
from chatapp.history.store import default_db_path
from chatapp.textsafe import for_stream, one_line


def config_path() -> int:
    """Print the config file's path (and, on stderr, whether it exists yet)."""
    path = paths.config_file()
    print(path)
    if not path.exists():
        print("(no config file yet: chatapp uses the defaults)", file=sys.stderr)
    return 0


def config_show() -> int:
    """Print the effective config as TOML; problems go to stderr and make the exit code 1."""
    path = paths.config_file()
    config, problems = load_config(path)
    source = path if path.exists() else f"{path} (not found, defaults)"
    print(f"# effective config from {source}")
    print(f"# history: {default_db_path()}; remembered UI choices: {state_file()}")
    print(to_toml(config), end="")
    for problem in problems:
        print(for_stream(sys.stderr)(one_line(f"warning: {problem}")), file=sys.stderr)
    return 1 if problems else 0
