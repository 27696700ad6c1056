"""The token loop in the worker: one reply or several, sampling, grammars, drafts."""
