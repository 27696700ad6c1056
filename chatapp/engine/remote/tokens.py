"""Turn a server's stream chunks and tokenizer answers into chatapp's tokens and candidates."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from chatapp.engine.protocol import Candidate, EngineError, GenerateRequest, TokenPiece
from chatapp.engine.remote.flavours import Flavour, Tokenize, flavour_of


@dataclass(frozen=True)
class StreamPiece:
    """One token as a stream chunk reported it (id -1 when the server gives no ids)."""

    text: str
    piece: bytes
    id: int = -1
    logprob: float | None = None
    candidates: tuple[Candidate, ...] = ()


def _bytes_of(entry: dict, token: str) -> bytes:
    raw = entry.get("bytes")
    if isinstance(raw, list) and all(isinstance(b, int) and 0 <= b < 256 for b in raw):
        return bytes(raw)
    return token.encode("utf-8")


def _id_of(entry: dict) -> int:
    value = entry.get("id")
    return value if isinstance(value, int) and not isinstance(value, bool) else -1


def _float(value) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and value == value:
        return float(value)
    return None


def candidates_from(top: list | dict | None, top_n: int) -> tuple[Candidate, ...]:
    """Candidates from OpenAI's top_logprobs list (or the legacy {token: logprob} dict).

    These servers do not say what their samplers kept, so p_final is the same as p. Entries
    with no probability (log p = -inf) are left out, and the list is sorted, deduplicated,
    capped.
    """
    if isinstance(top, dict):
        top = [{"token": k, "logprob": v} for k, v in top.items()]
    return _candidates(top, top_n, "logprob")


def candidates_after(top: list | None, top_n: int) -> tuple[Candidate, ...]:
    """Candidates from llama-server's top_probs (asked with post_sampling_probs): the tokens
    its samplers kept, with their probabilities after them (p_final); the probability before
    them is not reported (p is nan)."""
    return _candidates(top, top_n, "prob")


def _candidates(top: list | None, top_n: int, key: str) -> tuple[Candidate, ...]:
    if not isinstance(top, list) or top_n <= 0:
        return ()
    seen: set = set()
    out: list[Candidate] = []
    for entry in top:
        if not isinstance(entry, dict):
            continue
        token = entry.get("token")
        value = _float(entry.get(key))
        if not isinstance(token, str) or value is None:
            continue
        if key == "logprob":
            p = min(1.0, math.exp(value)) if value > -745 else 0.0
        else:
            p = min(1.0, max(0.0, value))
        key_id = (_id_of(entry), token) if _id_of(entry) >= 0 else token
        if p <= 0.0 or key_id in seen:
            continue
        seen.add(key_id)
        raw = p if key == "logprob" else math.nan
        out.append(Candidate(id=_id_of(entry), piece=_bytes_of(entry, token), p=raw, p_final=p))
    out.sort(key=lambda c: -c.p_final)
    return tuple(out[:top_n])


def _entries(logprobs) -> list[dict]:
    """Per-token logprob entries in the chat format, also from the legacy completions format."""
    if not isinstance(logprobs, dict):
        return []
    content = logprobs.get("content")
    if isinstance(content, list):
        return [e for e in content if isinstance(e, dict) and isinstance(e.get("token"), str)]
    tokens = logprobs.get("tokens")
    if not isinstance(tokens, list):
        return []
    lps = logprobs.get("token_logprobs") or []
    tops = logprobs.get("top_logprobs") or []
    return [
        {
            "token": tok,
            "logprob": lps[i] if i < len(lps) else None,
            "top_logprobs": tops[i] if i < len(tops) else None,
        }
        for i, tok in enumerate(tokens)
        if isinstance(tok, str)
    ]


def pieces_from_choice(choice: dict, top_n: int) -> list[StreamPiece]:
    """The tokens one streamed choice carries: one per logprob entry, else one per text delta."""
    delta = choice.get("delta")
    content = delta.get("content") if isinstance(delta, dict) else choice.get("text")
    content = content if isinstance(content, str) else ""
    entries = _entries(choice.get("logprobs"))
    if not entries:
        return [StreamPiece(content, content.encode("utf-8"))] if content else []
    texts = [e["token"] for e in entries]
    if len(entries) == 1 or "".join(texts) != content:
        # The delta text is what the user sees; put it on the last token of the chunk.
        texts = [""] * (len(entries) - 1) + [content]
    return [
        StreamPiece(
            text=text,
            piece=_bytes_of(entry, entry["token"]),
            id=_id_of(entry),
            logprob=_float(entry.get("logprob")),
            candidates=(
                candidates_after(entry["top_probs"], top_n)
                if "top_probs" in entry
                else candidates_from(entry.get("top_logprobs"), top_n)
            ),
        )
        for text, entry in zip(texts, entries, strict=True)
    ]


def pieces_from_llama_server(tokens: list) -> list[TokenPiece]:
    """llama-server's /tokenize with_pieces answer: piece is a string, or a byte list when it
    is not valid UTF-8 on its own."""
    out = []
    for item in tokens:
        if isinstance(item, dict):
            piece = item.get("piece", "")
            data = bytes(piece) if isinstance(piece, list) else str(piece).encode("utf-8")
            out.append(TokenPiece(int(item.get("id", -1)), data))
        else:
            out.append(TokenPiece(int(item), b""))
    return out


def align_pieces(text: str, pieces: list[bytes | None]) -> list[bytes]:
    """Fill the pieces a server could not detokenize alone (special tokens come back empty,
    a lone byte of a UTF-8 character fails) from the text that was tokenized.

    Known pieces are matched in order against the text's bytes; the bytes between two known
    pieces go to the unknown tokens between them. If the pieces do not line up with the text,
    they are returned as the server gave them.
    """
    data = text.encode("utf-8")
    out = [p or b"" for p in pieces]
    pos = 0
    pending: list[int] = []
    for i, piece in enumerate(pieces):
        if not piece:
            pending.append(i)
            continue
        at = data.find(piece, pos) if pending else (pos if data.startswith(piece, pos) else -1)
        if at < 0:
            return [p or b"" for p in pieces]
        if pending:
            _share(out, pending, data[pos:at])
            pending = []
        pos = at + len(piece)
    if pending:
        _share(out, pending, data[pos:])
    return out


def _share(out: list[bytes], idx: list[int], span: bytes) -> None:
    """Give a span of text to the unknown tokens that cover it. Exact for one token; for
    more it is a guess that fits byte-level BPE: the last tokens are single continuation
    bytes of a UTF-8 character, the first takes the rest."""
    if len(idx) == 1 or len(span) < len(idx):
        out[idx[0]] = span
        return
    head = len(span) - (len(idx) - 1)
    out[idx[0]] = span[:head]
    for k, i in enumerate(idx[1:]):
        out[i] = span[head + k : head + k + 1]


DETOKENIZE_MAX = 512  # per call on the llama-cpp-python server (one request per new token id)


class ServerTokenizer:
    """Tokenize with a server's own endpoints: llama-server's /tokenize (with pieces) or the
    llama-cpp-python server's /extras/tokenize plus /extras/detokenize per token (cached).

    `call(method, path, body)` returns the JSON answer or raises EngineError.
    """

    def __init__(self, call: Callable[..., dict], kind: str | Flavour, model: str | None) -> None:
        self.call, self.flavour, self.model = call, flavour_of(kind), model
        self._pieces: dict[int, bytes | None] = {}

    def tokenize(self, text: str, special: bool, add_special: bool) -> list[TokenPiece]:
        """The tokens of text; EngineError("this server cannot tokenize") for other servers."""
        if self.flavour.tokenize is Tokenize.PIECES:
            body = {
                "content": text,
                "add_special": add_special,
                "parse_special": special,
                "with_pieces": True,
            }
            return pieces_from_llama_server(self.call("POST", "/tokenize", body).get("tokens", []))
        if self.flavour.tokenize is not Tokenize.EXTRAS:
            raise EngineError("this server cannot tokenize")
        # This server always parses special tokens and adds BOS where the model wants one.
        answer = self.call("POST", "/extras/tokenize", {"input": text, "model": self.model})
        ids = [int(i) for i in answer.get("tokens", [])]
        budget = DETOKENIZE_MAX
        for tid in dict.fromkeys(ids):
            if tid in self._pieces or budget <= 0:
                continue
            budget -= 1
            try:
                got = self.call("POST", "/extras/detokenize", {"tokens": [tid]})
                self._pieces[tid] = str(got.get("text", "")).encode("utf-8")
            except EngineError as exc:
                if _unreachable(exc):
                    raise
                self._pieces[tid] = None  # e.g. a lone byte of a UTF-8 character
        pieces = align_pieces(text, [self._pieces.get(i) for i in ids])
        return [TokenPiece(i, p) for i, p in zip(ids, pieces, strict=True)]

    def prompt(self, request: GenerateRequest) -> tuple[str, tuple[TokenPiece, ...], bool]:
        """The prompt as the server will see it, its tokens, and whether both are exact.

        Exact on llama-server (/apply-template) and for raw prompts; otherwise the message
        text alone, without the server's chat template. Raises EngineError only when the
        server cannot be reached at all.
        """
        if request.raw_prompt is not None:
            rendered, exact = request.raw_prompt, True
        else:
            rendered, exact = "\n".join(m.content for m in request.messages), False
            if self.flavour.apply_template:
                msgs = [{"role": m.role, "content": m.content} for m in request.messages]
                try:
                    answer = self.call("POST", "/apply-template", {"messages": msgs})
                    rendered, exact = str(answer["prompt"]), True
                except (EngineError, KeyError) as exc:
                    if isinstance(exc, EngineError) and _unreachable(exc):
                        raise
        if not self.flavour.can_tokenize:
            return rendered, (), False
        try:
            tokens = tuple(self.tokenize(rendered, True, add_special=exact))
        except EngineError as exc:
            if _unreachable(exc):
                raise
            return rendered, (), False
        return rendered, tokens, exact and bool(tokens)


def _unreachable(exc: EngineError) -> bool:
    text = str(exc)
    return text.startswith("cannot connect") or "did not answer" in text
