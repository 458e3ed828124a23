"""JSON request bodies parsed strictly: an object with a repeated key is refused (422 ``duplicate_key``)
rather than silently keeping the last value, on every route that takes a body.

orjson keeps the last of repeated keys and says nothing, so the check is made after it parsed (the body is
then known to be valid JSON), in one of two exact ways, whichever is cheaper for the body:

- **Scanning the raw bytes** (``_scan``), for large bodies made mostly of numbers (a tensor's values as a
  JSON array): only the bytes ``"``, ``{`` and ``}`` matter (an array of numbers has none), and they are
  found by ``bytes.find`` (memchr) so a megabyte of numbers between two of them costs microseconds. The
  scanner keeps one set of keys per open object; a string is a key when the next byte after blanks is ``:``;
  a string's end is the first ``"`` after an even run of backslashes; a key with a backslash is compared as
  JSON decodes it (``"a"`` and ``"\\u0061"`` are one key). Its Python work is per string and brace, so it
  gives up after a budget proportional to the body (``None``) and the next way decides.
- **Counting colons** (``_count_colons``), for small and string-dense bodies (op lists): each key in a body
  is followed by exactly one ``:`` outside strings, and re-serialising what orjson kept writes one per key
  it kept, with every string as it was (orjson never escapes ``:``). Equal counts prove no key was dropped;
  any doubt (a difference, which may also come from colons inside dropped values, or ``\\u`` escapes, which
  may spell a colon) is settled by the standard library's parser, which reports every key. Re-serialising
  costs about half of orjson's parse for a long array of floats, which is why such bodies are scanned.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson
from fastapi.routing import APIRoute
from starlette.requests import Request

from gradserve_server.app.errors import InvalidInput

#: Bodies shorter than this are checked by counting colons (a few microseconds; the scanner costs more)
SCAN_MIN_BYTES = 64 * 1024
#: ... and so are bodies with more than this many ``"`` in their first 4 KiB (op lists: strings everywhere)
SCAN_MAX_QUOTES_PER_4K = 64
#: The scanner's budget: strings, braces and escaped quotes, per byte of body (plus a constant)
SCAN_TOKENS_PER_BYTE = 1 / 1024

_BLANKS_THEN_COLON = re.compile(rb"[ \t\n\r]*:")


def _duplicate(key: str) -> InvalidInput:
    return InvalidInput(f"duplicate key {key!r} in a JSON object: every key may appear once", code="duplicate_key")


def _refuse_repeats(pairs: list[tuple[str, Any]]) -> dict:
    seen = {}
    for key, value in pairs:
        if key in seen:
            raise _duplicate(key)
        seen[key] = value
    return seen


def _exact(body: bytes) -> None:
    """The standard library's parser, which reports every key (slow: the last word)."""
    try:
        json.loads(body, object_pairs_hook=_refuse_repeats)
    except RecursionError:
        pass  # nested deeper than Python parses: refused as too deep by the request's validation


def _scan(body: bytes, budget: int) -> bool:
    """Raise InvalidInput(``duplicate_key``) when the valid JSON ``body`` repeats a key in one of its
    objects; True when it does not, False when ``budget`` (strings, braces and escapes) ran out first.

    The next ``"``, ``{``, ``}`` and ``\\`` are each remembered until passed, so every byte is searched for
    each of them at most once (memchr), however the body is made."""
    find = body.find
    end_of_body = len(body)
    colon_after = _BLANKS_THEN_COLON.match

    def next_at(byte: bytes, start: int) -> int:
        at = find(byte, start)
        return end_of_body if at < 0 else at

    quote, opening, closing, backslash = (next_at(b'"', 0), next_at(b"{", 0), next_at(b"}", 0),
                                          next_at(b"\\", 0))
    open_objects: list[set] = []  # the keys of each enclosing object
    keys: set = set()  # the innermost open object's (a dummy outside every object)
    while True:
        at = min(quote, opening, closing)
        if at == end_of_body:
            return not open_objects
        budget -= 1
        if budget < 0:
            return False
        if at == opening:
            open_objects.append(keys)
            keys = set()
            opening = next_at(b"{", at + 1)
            continue
        if at == closing:
            if not open_objects:
                return False  # not the valid JSON this expects: let the exact way decide
            keys = open_objects.pop()
            closing = next_at(b"}", at + 1)
            continue
        # a string from ``at``: a backslash escapes the byte after it; the first other '"' ends it
        pos = at + 1
        escaped = False
        while True:
            if quote < pos:
                quote = next_at(b'"', pos)
            if backslash < pos:
                backslash = next_at(b"\\", pos)
            if backslash >= quote:
                break
            budget -= 1
            if budget < 0:
                return False
            escaped = True
            pos = backslash + 2
        end = quote
        if end == end_of_body:
            return False
        if colon_after(body, end + 1):  # a key
            key = orjson.loads(body[at:end + 1]) if escaped else body[at + 1:end].decode()  # "\u0061" is "a"
            if key in keys:
                raise _duplicate(key)
            keys.add(key)
        quote = next_at(b'"', end + 1)
        if opening < end:  # braces inside the string are no braces
            opening = next_at(b"{", end + 1)
        if closing < end:
            closing = next_at(b"}", end + 1)


def _count_colons(body: bytes, data: Any) -> None:
    """Raise InvalidInput(``duplicate_key``) when ``body`` (parsed by orjson into ``data``) repeats a key."""
    colons = body.count(b":")
    if not colons:
        return
    if b"\\" not in body or b"\\u" not in body:  # memchr first: the two-byte search is slow on megabytes
        try:
            if orjson.dumps(data).count(b":") == colons:
                return
        except orjson.JSONEncodeError:  # nested deeper than orjson writes (255): the exact way
            pass
    _exact(body)


def check_unique_keys(body: bytes, data: Any) -> None:
    """Raise InvalidInput(``duplicate_key``) when ``body`` (already parsed by orjson into ``data``) repeats a
    key in one of its objects."""
    size = len(body)
    if size >= SCAN_MIN_BYTES and body.count(b'"', 0, 4096) <= SCAN_MAX_QUOTES_PER_4K:
        if _scan(body, 64 + int(size * SCAN_TOKENS_PER_BYTE)):
            return
    _count_colons(body, data)


#: Every digit becomes "0", a dot stays a dot, every other byte becomes a blank
_DIGIT_SHAPE = bytes(48 if 48 <= b <= 57 else 46 if b == 46 else 32 for b in range(256))
#: An integer literal of 19 digits or more (not the fraction of a float): the only way to write an integer
#: outside int64, which orjson reads as a float (a 20-digit one) or as a uint64
_LONG_INTEGER = b" " + b"0" * 19


def has_long_integer(body: bytes) -> bool:
    """Whether ``body`` may hold an integer literal outside int64 (false positives are only slower)."""
    return body.translate(_DIGIT_SHAPE).find(_LONG_INTEGER) >= 0


def loads(body: bytes) -> Any:
    """``orjson.loads`` that refuses repeated keys (raises orjson.JSONDecodeError for malformed JSON), with
    integers beyond 64 bits kept exact (orjson rounds them to floats, and ``tensor`` data of them must be
    refused as torch refuses it, not stored as float32)."""
    data = orjson.loads(body)
    check_unique_keys(body, data)
    if has_long_integer(body):
        try:
            return json.loads(body)  # exact Python ints; valid JSON, as orjson just said
        except ValueError:  # more digits than Python converts (4300)
            raise InvalidInput("Overflow when unpacking long long: an integer literal has more than 4300 digits",
                               code="invalid_tensor_data") from None
    return data


class StrictJSONRoute(APIRoute):
    """A route whose JSON body (parsed by FastAPI) is first checked for repeated keys."""

    def get_route_handler(self):
        handler = super().get_route_handler()

        async def strict_handler(request: Request):
            body = await request.body()  # cached on the request: FastAPI's own parse reads the same bytes
            if body:
                try:
                    data = orjson.loads(body)
                except orjson.JSONDecodeError:
                    data = None  # FastAPI reports malformed JSON itself
                else:
                    check_unique_keys(body, data)
            return await handler(request)

        return strict_handler
