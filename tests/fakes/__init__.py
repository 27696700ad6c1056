"""The tests' stand-ins, in one place: engines (scripted, fixed, broken, hostile), a Hub on
127.0.0.1, and GGUF files built byte by byte."""
