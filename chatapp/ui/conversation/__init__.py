"""The conversation pane and what only it uses: its reply, panels, branches, copy, attachments."""
