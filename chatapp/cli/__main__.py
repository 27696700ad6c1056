"""`python -m chatapp.cli`: the same as the `chatapp` command."""

from chatapp.cli import main

main()
