"""Talking to the Hub through huggingface_hub: endpoint, token and offline mode read at call
time, and its exceptions turned into one sentence each."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from chatapp.errors import HubError

DEFAULT_ENDPOINT = "https://huggingface.co"
_TRUE = {"1", "ON", "YES", "TRUE"}


def endpoint() -> str:
    """The Hub's address: $HF_ENDPOINT (a mirror, or the tests' fake Hub), else huggingface.co."""
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def offline() -> bool:
    """HF_HUB_OFFLINE=1: never touch the network (huggingface_hub's own switch)."""
    return os.environ.get("HF_HUB_OFFLINE", "").upper() in _TRUE


def token() -> str | None:
    """$HF_TOKEN, else huggingface_hub's saved login (`hf auth login`), else None."""
    from huggingface_hub import get_token

    return os.environ.get("HF_TOKEN") or get_token()


def check_reachable(what: str, timeout: float = 5.0) -> None:
    """Fail at once, in one sentence, when the Hub's host does not answer: huggingface_hub
    retries a refused connection with backoff for ~20 s before it gives up."""
    import socket
    from urllib.parse import urlsplit

    url = urlsplit(endpoint())
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname, port), timeout=timeout).close()
    except OSError as exc:
        raise unreachable(what) from exc


def api():
    """An HfApi on endpoint() with token()."""
    from huggingface_hub import HfApi

    return HfApi(endpoint=endpoint(), token=token())


def repo_page(repo: str) -> str:
    return f"{endpoint()}/{repo}"


def offline_error(what: str) -> HubError:
    return HubError(
        f"{what} is not on this machine, and the Hub cannot be reached (HF_HUB_OFFLINE is set, "
        "or there is no network): connect and try again, or give a file that is here"
    )


def _status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    return getattr(response, "status_code", None)


@contextlib.contextmanager
def hub_errors(repo: str, filename: str = "") -> Iterator[None]:
    """Turn what huggingface_hub and httpx raise into a HubError of one sentence."""
    from huggingface_hub import errors

    what = f"{repo}/{filename}" if filename else repo
    try:
        yield
    except errors.GatedRepoError as exc:
        raise HubError(
            f"{repo} is gated: accept its licence on {repo_page(repo)}, then log in with "
            "`hf auth login` (or set HF_TOKEN)"
        ) from exc
    except errors.RepositoryNotFoundError as exc:
        raise HubError(
            f"no model repo {repo} on the Hub (or it is private: log in with `hf auth login` "
            "or set HF_TOKEN); check the name, or find one with `chatapp search`"
        ) from exc
    except (errors.EntryNotFoundError, errors.RevisionNotFoundError) as exc:
        raise HubError(f"the Hub has no {what}: see `chatapp pull {repo} --list`") from exc
    except errors.HFValidationError as exc:  # (specs.parse_spec refuses these first)
        raise HubError(
            f"{repo!r} is not a name the Hub takes ({exc}): check the name, or find one with "
            "`chatapp search`"
        ) from exc
    except errors.OfflineModeIsEnabled as exc:
        raise offline_error(what) from exc
    except errors.HfHubHTTPError as exc:
        raise _http_error(what, _status(exc)) from exc
    except Exception as exc:
        if _named(exc, "HTTPStatusError"):
            raise _http_error(what, _status(exc)) from exc
        if _named(exc, "TransportError", "TimeoutException") or isinstance(
            exc, (ConnectionError, TimeoutError)
        ):
            raise unreachable(what) from exc
        raise


def _named(exc: BaseException, *names: str) -> bool:
    """huggingface_hub 1.x raises httpx's exceptions, 2.x httpx2's: match them by name."""
    return any(c.__name__ in names for c in type(exc).__mro__)


def unreachable(what: str) -> HubError:
    return HubError(
        f"the Hub ({endpoint()}) cannot be reached for {what}: check the network, then run "
        "the same command again (a download resumes where it stopped)"
    )


def _http_error(what: str, status: int | None) -> HubError:
    if status in (401, 403):
        return HubError(
            f"the Hub refused {what} ({status}): log in with `hf auth login` or set HF_TOKEN, "
            "and accept the model's licence on its page if it is gated"
        )
    if status == 404:
        return HubError(f"the Hub has no {what} (404): check the name")
    if status is not None and status >= 500:
        return HubError(
            f"the Hub failed on {what} ({status}, a server error): try again in a while"
        )
    return HubError(f"the Hub answered {status} for {what}: try again, or check the name")
