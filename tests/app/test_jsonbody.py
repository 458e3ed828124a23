"""Repeated JSON keys (gradserve_server/app/jsonbody.py): both of its ways (scanning the raw bytes, counting colons)
and the
choice between them give exactly the standard library's answer, on adversarial bodies and on random ones."""

from __future__ import annotations

import json
import random

import numpy as np
import orjson
import pytest

from gradserve_server.app import jsonbody
from gradserve_server.app.errors import InvalidInput
from tests.app.conftest import assert_problem

#: (body, the repeated key or None)
CASES = [
    (b'{"a": 1, "a": 2}', "a"),
    (b'{"a": 1, "b": 2}', None),
    (b'{"a":1,"a":2}', "a"),
    (b'{"a" \n\t\r : 1, "a"\n:2}', "a"),  # blanks between a key and its colon
    (b'{"a": {"a": {"a": 1}}}', None),  # one key in each of nested objects
    (b'[{"a": 1}, {"a": 2}]', None),  # siblings
    (b'{"x": [{"a": 1}, {"b": 1, "b": 2}]}', "b"),
    (b'{"a": 1, "b": {"c": 1}, "a": 2}', "a"),  # the repeat after a closed inner object
    (b'{"b": {"a": 1}, "a": 2}', None),  # the inner object's key is not the outer's
    (b'{"a": 1, "\\u0061": 2}', "a"),  # differ only by an escape
    (b'{"\\u0061": 1, "\\u0061": 2}', "a"),
    (b'{"\\u0061": 1, "\\u0062": 2}', None),
    (b'{"/": 1, "\\/": 2}', "/"),
    (b'{"\\"": 1, "\\u0022": 2}', '"'),
    (b'{"\\\\": 1, "\\u005c": 2}', "\\"),
    (b'{"\\\\": 1, "\\\\\\\\": 2}', None),  # one backslash, two backslashes
    (b'{"a\\\\": 1, "a": 2}', None),  # 'a\' is not 'a': the even run of backslashes ends the string
    (b'{"a\\"": 1, "a": 2}', None),  # 'a"' is not 'a'
    (b'{"\\ud83d\\ude00": 1, "\xf0\x9f\x98\x80": 2}', "\U0001f600"),  # an escaped pair and its UTF-8
    (b'{"\xc3\xa9": 1, "\\u00e9": 2}', "\u00e9"),
    (b'{"\xc3\xa9": 1, "e\\u0301": 2}', None),  # not normalised: two keys, as JSON and orjson see them
    (b'{"s": "\\"a\\": 1, \\"a\\": 2"}', None),  # keys inside a string are no keys
    (b'{"s": "{\\"a\\": 1, \\"a\\": 2}"}', None),
    (b'{"s": "}", "a": 1, "t": "{", "a": 2}', "a"),  # braces inside strings are no braces
    (b'{"s": "{{{", "a": 1, "a": 2}', "a"),
    (b'{"s": "}}}", "t": {"a": 1}, "a": 2}', None),
    (b'{"a:b": 1, "a": 2, "b": 3}', None),  # colons inside keys
    (b'{"a": ":", "b": "::"}', None),
    (b'{"a": "x", "b": ["a", "a"]}', None),  # strings in arrays are values
    (b'{"a": [1, 2, {"c": [3, {"d": 1, "d": 1}]}]}', "d"),
    (b'{"": 1, "": 2}', ""),
    (b'[1, 2.5, -3e10, true, false, null, "a"]', None),
    (b'"a"', None),
    (b"1", None),
    (b'{"a": "\\\\\\\\\\\\"}', None),
    (b'{"a": "\\\\\\\\\\\\", "a": 0}', "a"),
    (b'{"a": "\\\\\\"\\\\", "b": 0}', None),
]
DEEP = 200
CASES += [
    (b'{"k": ' * DEEP + b'{"a": 1, "a": 2}' + b"}" * DEEP, "a"),  # repeated deep inside
    (b'{"k": ' * DEEP + b'{"a": 1, "b": 2}' + b"}" * DEEP, None),
    (b'[{"k": ' * DEEP + b"1" + b"}]" * DEEP, None),
    (b'{"k": [' * DEEP + b"0" + b"]}" * DEEP, None),
    (b'{"k": 1, "x": ' + b'{"k": ' * DEEP + b"1" + b"}" * DEEP + b', "k": 2}', "k"),
]


def repeats(body: bytes) -> set[str]:
    """Every key repeated in one of ``body``'s objects (the standard library's parser sees every pair)."""
    found: set[str] = set()

    def hook(pairs):
        keys = [key for key, _ in pairs]
        found.update(key for key in keys if keys.count(key) > 1)
        return dict(pairs)

    json.loads(body, object_pairs_hook=hook)
    return found


def message(key: str) -> str:
    return f"duplicate key {key!r} in a JSON object: every key may appear once"


def agrees(check, body: bytes) -> bool:
    """``check`` refuses ``body`` exactly when it repeats a key, naming one of those it repeats."""
    expected = repeats(body)
    try:
        check(body)
    except InvalidInput as exc:
        assert exc.code == "duplicate_key" and exc.status == 422
        return exc.detail in {message(key) for key in expected}
    return not expected


def scanned(body: bytes) -> None:
    assert jsonbody._scan(body, 1 << 30), "the scanner gave up on a valid body with an unbounded budget"


def counted(body: bytes) -> None:
    jsonbody._count_colons(body, orjson.loads(body))


def chosen(body: bytes) -> None:
    jsonbody.loads(body)


NUMBERS = orjson.dumps(np.random.default_rng(0).standard_normal(20_000).astype(np.float32).tolist())


BLANKS = b"[" + b" " * jsonbody.SCAN_MIN_BYTES + b"]"


def padded(body: bytes, filler: bytes = NUMBERS) -> bytes:
    """``body`` between long arrays (of numbers): large and sparse, so check_unique_keys scans it."""
    return b'{"pad": ' + filler + b', "body": ' + body + b', "tail": ' + filler + b"}"


@pytest.mark.parametrize(("body", "repeated"), CASES)
@pytest.mark.parametrize("check", [scanned, counted, chosen])
def test_repeated_keys_are_found_exactly(body, repeated, check):
    assert repeats(body) == ({repeated} if repeated is not None else set())
    assert agrees(check, body)
    big = padded(body)
    assert len(big) >= jsonbody.SCAN_MIN_BYTES
    assert agrees(check, big)


def test_a_large_array_of_numbers_is_scanned_within_its_budget():
    """The body bench/api.py's "JSON in" row parses: the scanner decides, without falling back."""
    values = np.random.default_rng(1).standard_normal(200_000).astype(np.float32).tolist()
    body = orjson.dumps({"ops": [{"op": "tensor", "out": "x", "args": [values], "kwargs": {"requires_grad": True}}],
                         "return": ["x"]})
    assert body.count(b'"', 0, 4096) <= jsonbody.SCAN_MAX_QUOTES_PER_4K
    assert jsonbody._scan(body, 64 + int(len(body) * jsonbody.SCAN_TOKENS_PER_BYTE))
    repeated = body[:-1] + b', "return": []}'
    with pytest.raises(InvalidInput, match="duplicate key 'return'"):
        jsonbody._scan(repeated, 64 + int(len(repeated) * jsonbody.SCAN_TOKENS_PER_BYTE))


def test_a_budget_that_runs_out_falls_back_to_the_exact_way():
    many = b"[" + b",".join(b'{"a": %d, "b": "\\\\\\"x"}' % i for i in range(5000)) + b', {"a": 1, "a": 2}]'
    assert jsonbody._scan(many, 100) is False
    assert repeats(many) and agrees(chosen, many)
    escapes = b'{"s": "' + b"\\n" * 100_000 + b'", "s": 1}'
    assert jsonbody._scan(escapes, 1000) is False
    assert repeats(escapes) and agrees(chosen, escapes)
    spaces = b'{"s": 1' + b" " * 100_000 + b', "s": 2}'
    assert repeats(spaces) and agrees(chosen, spaces)


# ----- random documents, keys spelt in random ways --------------------------------------------------------
KEYS = ["a", "b", "ab", "\u00e9", '"', "\\", "/", ":", "{", "}", "\U0001f600", ""]


def spell(text: str, rng: random.Random) -> str:
    """``text`` as a JSON string, each character written plainly or escaped, at random."""
    out = []
    for ch in text:
        choice = rng.random()
        if ch in '"\\':
            out.append("\\" + ch if choice < 0.5 else f"\\u{ord(ch):04x}")
        elif ch == "/" and choice < 0.3:
            out.append("\\/")
        elif ord(ch) > 0xFFFF:
            hi, lo = divmod(ord(ch) - 0x10000, 0x400)
            out.append(f"\\u{0xD800 + hi:04x}\\u{0xDC00 + lo:04X}" if choice < 0.5 else ch)
        elif choice < 0.25:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def blank(rng: random.Random) -> str:
    return rng.choice(["", "", " ", "\n  ", "\t"])


def document(rng: random.Random, depth: int) -> str:
    kind = rng.random() if depth < 6 else 1.0
    if kind < 0.4:
        count = rng.randrange(4)
        keys = rng.sample(KEYS, count)
        if count and rng.random() < 0.15:  # a repeat
            keys.insert(rng.randrange(count + 1), rng.choice(keys))
        members = [f"{blank(rng)}{spell(k, rng)}{blank(rng)}:{blank(rng)}{document(rng, depth + 1)}" for k in keys]
        return "{" + ",".join(members) + blank(rng) + "}"
    if kind < 0.6:
        return "[" + ",".join(document(rng, depth + 1) for _ in range(rng.randrange(4))) + "]"
    if kind < 0.8:  # strings that look like JSON
        return spell(rng.choice(['{"a": 1, "a": 2}', 'a": "a', "}{", "\\", "x"]), rng)
    return rng.choice(["1", "-2.5e3", "true", "null", "[0.5, 1, 2]"])


@pytest.mark.parametrize("seed", range(4))
def test_random_documents_agree_with_the_standard_library(seed):
    rng = random.Random(seed)
    refused = 0
    for _ in range(400):
        body = document(rng, 0).encode()
        orjson.loads(body)  # valid JSON, as the checks expect
        refused += bool(repeats(body))
        for check in (scanned, counted, chosen):
            assert agrees(check, body), body
        assert agrees(chosen, padded(body, BLANKS)), body
    assert refused > 20


# ----- over HTTP ------------------------------------------------------------------------------------------
def test_a_large_body_with_a_deep_repeat_is_a_problem(client):
    values = list(range(50_000))
    body = orjson.dumps({"ops": [{"op": "tensor", "out": "x", "args": [values]}], "return": ["x"]})
    assert client.post("/v1/eval", content=body, headers={"content-type": "application/json"}).status_code == 200
    repeated = body.replace(b'"out":"x"', b'"out":"x","\\u006fut":"y"')
    problem = assert_problem(client.post("/v1/eval", content=repeated, headers={"content-type": "application/json"}),
                             422, "duplicate_key")
    assert "'out'" in problem["detail"]
