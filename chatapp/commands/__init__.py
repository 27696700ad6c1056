"""The command-line commands, one module each; cli.py wires them into typer."""
