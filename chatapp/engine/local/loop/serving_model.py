"""The loaded model as the worker serves replies with it: plus its steering and its drafters."""

from __future__ import annotations

from dataclasses import replace

from chatapp.engine.local.inside.context_steering import ContextSteering
from chatapp.engine.local.load.loaded_model import LoadedModel
from chatapp.engine.local.loop.drafts import ModelDrafter, NgramDrafter, vocab_mismatch
from chatapp.engine.protocol import LoadOptions

Drafter = NgramDrafter | ModelDrafter


class ServingModel(LoadedModel):
    """A LoadedModel with the control vector on its context and the drafters its replies ask
    for (the draft model loaded beside it, LoadOptions.draft_model)."""

    def __init__(self, options: LoadOptions) -> None:
        super().__init__(options)
        self.steering = ContextSteering(self)  # the control vector on the context (none yet)
        self.draft_worker: LoadedModel | None = None
        self._drafters: dict[str, Drafter] = {}

    def load_draft(self, path: str) -> str:
        """Load the draft model beside this one; returns why it cannot draft ('' if it can)."""
        options = replace(
            self.options, model_path=path, draft_model=None, chat_template=None, n_ctx=self.n_ctx
        )
        draft = LoadedModel(options)
        if draft.warm_up() != 0:
            return f"could not load the draft model {path}: llama.cpp's first decode failed"
        why = vocab_mismatch(self, draft)
        if why:
            return (
                f"{path} cannot draft for {self.options.model_path}: {why}; a draft model "
                "needs the same vocabulary (a smaller quant or a smaller model of the family)"
            )
        self.draft_worker = draft
        self._drafters["model"] = ModelDrafter(draft)
        self.info = replace(self.info, draft_model=path)
        return ""

    def drafter(self, kind: str) -> tuple[Drafter | None, str]:
        """The drafter a request asks for ("ngram", "model", "": none) and a notice, said once,
        when it cannot have it."""
        if not kind:
            return None, ""
        if kind == "ngram" and "ngram" not in self._drafters:
            self._drafters["ngram"] = NgramDrafter()
        found = self._drafters.get(kind)
        if found is not None:
            return found, ""
        note = (
            "no draft model is loaded (start with --draft MODEL.gguf); decoding one token at a time"
            if kind == "model"
            else f"unknown draft source {kind!r}; decoding one token at a time"
        )
        if note in self.noted:
            return None, ""
        self.noted.add(note)
        return None, note
