"""The Textual UI: the only package that imports textual."""
