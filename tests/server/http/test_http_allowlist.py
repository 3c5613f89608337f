"""The Host/Origin allowlist's remembered verdicts and the raw header reads every request passes
(server/http/allowlist.py, server/http/headers.py); the end-to-end checks are in
tests/server/http/test_http_hostile.py."""

from __future__ import annotations

from managed_tools.server.http.allowlist import MEMO_CAP, Allowlist
from managed_tools.server.http.headers import header, headers


def test_a_remembered_verdict_is_the_parsed_one_and_the_memo_stays_bounded() -> None:
    allowlist = Allowlist(("localhost:*", "tools.example.lan:8080"), ("https://app.example.com",))
    cases = {
        "localhost:8765": True,
        "LOCALHOST:1": True,  # names compare case-insensitively
        "tools.example.lan": False,  # an entry with a port matches only that port
        "localhost:evil.example": False,
        "tools.example.lan:8080": True,
        "tools.example.lan:80801": False,
    }
    for _ in range(2):  # the second round answers from the memo
        assert {value: allowlist.admits_host(value) for value in cases} == cases
    assert allowlist.admits_origin("https://app.example.com") and allowlist.admits_origin("https://app.example.com")
    assert not allowlist.admits_origin("https://app.example.com.evil.example")
    assert not allowlist.admits_origin("https://app.example.com.evil.example")
    assert allowlist.admits_origin(None) and not allowlist.admits_host(None)

    for port in range(MEMO_CAP * 2):  # a client sending ever new values cannot grow the memo
        allowlist.admits_host(f"evil-{port}.example")
    assert len(allowlist._host_verdicts) <= MEMO_CAP
    assert {value: allowlist.admits_host(value) for value in cases} == cases


def test_the_first_of_a_repeated_header_counts_and_names_are_exact() -> None:
    scope = {
        "headers": [(b"host", b"localhost:1"), (b"x-other", b"x"), (b"host", b"evil.example"), (b"origin", b"\xe9")]
    }
    assert header(scope, b"host") == "localhost:1"
    assert header(scope, b"authorization") is None
    assert headers(scope, frozenset({b"host", b"origin", b"authorization"})) == {b"host": "localhost:1", b"origin": "é"}
