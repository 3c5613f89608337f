"""Secret scanning at the gate: credentials in what goes to an upstream server or the shell, and in what comes back.

The detectors are Yelp's detect-secrets plugins (docs/decisions/secret-scanning.md): their patterns, entropy
measure and heuristics, run on strings, never through `analyze_line` or the library's scan functions: those read
process-wide settings and may *verify* a candidate by sending it to the service it belongs to, and a secret must
never leave the machine. Three kinds of finding:

- the well-known key and token shapes (AWS, GitHub, GitLab, Slack, Stripe, OpenAI, npm, PyPI, JWT, ...), found on
  the whole text at once;
- private keys: the whole PEM block, BEGIN to END (or to the end of the text when it was cut), since the
  detector only names the header line and the key material is the body;
- assignments of a secret-sounding name (`password=`, `api_key:`), and high-entropy quoted strings assigned to
  anything, per line, with the library's own heuristics against ids, uuids, templates and sequences.

A hit is the secret's value, never recorded: callers mask it and record only its kind.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from managed_tools.tools.framework.wire import redaction

if TYPE_CHECKING:
    from detect_secrets.plugins.base import RegexBasedDetector
    from detect_secrets.plugins.high_entropy_strings import HighEntropyStringsPlugin
    from detect_secrets.plugins.keyword import KeywordDetector

# The regex detectors of the well-known shapes. Left out: IPPublicDetector (an address is no credential), the
# private-key one (handled whole, below), and five vendor ones whose keyword-led patterns cost 20 times the others
# on every result (Artifactory, Cloudant, IBM Cloud IAM, IBM COS HMAC, SoftLayer): bench/secret_scan.py.
SHAPES = (
    ("aws", "AWSKeyDetector"),
    ("azure_storage_key", "AzureStorageKeyDetector"),
    ("basic_auth", "BasicAuthDetector"),
    ("discord", "DiscordBotTokenDetector"),
    ("github_token", "GitHubTokenDetector"),
    ("gitlab_token", "GitLabTokenDetector"),
    ("jwt", "JwtTokenDetector"),
    ("mailchimp", "MailchimpDetector"),
    ("npm", "NpmDetector"),
    ("openai", "OpenAIDetector"),
    ("pypi_token", "PypiTokenDetector"),
    ("sendgrid", "SendGridDetector"),
    ("slack", "SlackDetector"),
    ("square_oauth", "SquareOAuthDetector"),
    ("stripe", "StripeDetector"),
    ("telegram_token", "TelegramBotTokenDetector"),
    ("twilio", "TwilioKeyDetector"),
)
# A PEM private key, raw or inside a JSON string (its line breaks escaped), to its END line or the text's end.
PRIVATE_KEY = re.compile(
    r"-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY( BLOCK)?-----.*?(?:-----END[A-Z0-9 ]{0,40}PRIVATE KEY( BLOCK)?-----|\Z)",
    re.DOTALL,
)
# Subresource-integrity digests (`sha512-...` in a lock file) are public hashes of public content, not secrets.
INTEGRITY = re.compile(r"^sha(?:256|384|512)-[A-Za-z0-9+/=]+$")
ASSIGNED = re.compile(r"[=:]\s*\Z")  # a quoted string counts as an assignment when `=` or `:` comes before it
# Words joined by dots are a name (`user.secret_scanning`, an event type `secret.detected`), not a credential.
DOTTED_NAME = re.compile(r"^[A-Za-z_]+(?:\.[A-Za-z_]+)+$")
KEYWORD_HINT = re.compile(r"key|pass|pwd|secret|contras")
KEYWORD_HINT_ANY_CASE = re.compile(KEYWORD_HINT.pattern, re.IGNORECASE)  # where lower() changes the length
# An unquoted value that can be a credential: no spaces or brackets, and more than a bare name (a digit or a sign).
TOKEN_LIKE = re.compile(r"^(?=.*[^A-Za-z_])[^\s()\[\]{}<>,;]+$")
# A line that is an assignment as a whole: `export NAME=value`, `NAME=value`, `name: value` (env, .env, YAML).
CONFIG_LINE = re.compile(r"^\s*(?:export\s+|-\s+)?[\"']?[A-Za-z_][\w.-]*[\"']?\s*[=:]")
MIN_SECRET_CHARS = 8  # a detector's fragment shorter than this (a bare `ghp` prefix) is no value to mask
MIN_ENTROPY_CHARS = 20  # a shorter quoted string is a word or an id, whatever its entropy


class SecretScanning(BaseModel):
    """config.json `secretScanning`: on by default, for the shell's and the upstream servers' tools."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    arguments: bool = True  # a credential in an argument asks a person first (the question masks it)
    results: bool = True  # a credential in a result is masked before the model, the events and the index see it


@dataclass(frozen=True)
class Hit:
    """One credential found: its kind (the detector's name for it) and its value, which is never recorded."""

    kind: str
    value: str


@dataclass(frozen=True)
class _Detectors:
    shapes: tuple[RegexBasedDetector, ...]
    keyword: KeywordDetector
    keyword_names: re.Pattern[str]  # the library's list of secret-sounding names
    keyword_config: dict[Any, int]
    quoted_config: dict[Any, int]
    entropy: tuple[HighEntropyStringsPlugin, ...]  # base64 and hex
    filters: tuple[Callable[[str], bool], ...]  # the library's heuristics against ids, uuids, templates


@functools.cache
def _detectors() -> _Detectors:
    """Loaded on the first scan: the library imports `requests` (a tenth of a second) that start-up need not pay."""
    import importlib

    from detect_secrets.filters import heuristic
    from detect_secrets.plugins import keyword
    from detect_secrets.plugins.high_entropy_strings import Base64HighEntropyString, HexHighEntropyString

    shapes = tuple(
        getattr(importlib.import_module(f"detect_secrets.plugins.{module}"), name)() for module, name in SHAPES
    )
    return _Detectors(
        shapes=shapes,
        keyword=keyword.KeywordDetector(),
        # The library's patterns for code (quotes required) everywhere, and its config-file ones (unquoted values)
        # on the lines that are assignments.
        keyword_names=re.compile(keyword.DENYLIST_REGEX, re.IGNORECASE),
        keyword_config=keyword.CONFIG_DENYLIST_REGEX_TO_GROUP,
        quoted_config=keyword.QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP,
        entropy=(Base64HighEntropyString(limit=4.5), HexHighEntropyString(limit=3.0)),
        filters=(
            heuristic.is_sequential_string,
            heuristic.is_potential_uuid,
            heuristic.is_templated_secret,
            heuristic.is_prefixed_with_dollar_sign,
        ),
    )


def find(text: str) -> list[Hit]:
    """Every credential in `text`, each value once, longest first (so masking a longer one leaves nothing of it).

    Each detector runs over the whole text at once (a per-line loop costs ten times as much); only the lines
    that name a secret-sounding key go through the keyword patterns."""
    if len(text) < MIN_SECRET_CHARS:
        return []
    detectors = _detectors()
    found: dict[str, str] = {}
    for match in PRIVATE_KEY.finditer(text):
        found.setdefault(match.group(0), "Private Key")
    for shape in detectors.shapes:
        for pattern in shape.denylist:
            for match in pattern.finditer(text):
                found.setdefault(_shape_value(match), shape.secret_type)
    for value in _assignments(detectors, text):
        found.setdefault(value, detectors.keyword.secret_type)
    for plugin in detectors.entropy:
        for match in plugin.regex.finditer(text):
            value = match.group(2)
            line_start = text.rfind("\n", 0, match.start()) + 1
            if (
                len(value) >= MIN_ENTROPY_CHARS
                and ASSIGNED.search(text, line_start, match.start())
                and plugin.calculate_shannon_entropy(value) > plugin.entropy_limit
                and not INTEGRITY.match(value)
            ):
                found.setdefault(value, plugin.secret_type)
    hits = [Hit(kind, value) for value, kind in found.items() if _worth_masking(detectors, value)]
    return sorted(hits, key=lambda hit: len(hit.value), reverse=True)


def _shape_value(match: re.Match[str]) -> str:
    """What to mask of a shape's match. The library yields its patterns' groups, which are sometimes the secret
    after its context (the password of a URL's user info, an AWS key after its name) and sometimes only a prefix
    (`ghp` of a GitHub token): a group that ends the match is the secret, otherwise the whole match is."""
    if match.re.groups and match.group(1) and match.end(1) >= match.end() - 1:
        return match.group(1)
    return match.group(0)


def _assignments(detectors: _Detectors, text: str) -> Iterator[str]:
    """Values assigned to a secret-sounding name: quoted anywhere (`password = "..."`), or unquoted on a line that
    is itself an assignment (`export API_KEY=...`, `secret: ...` in an env or config file), and then only a value
    shaped like a token, so prose (`secret: never its value.`) and type annotations (`secrets: set[str]`) are no
    hits."""
    seen: set[int] = set()
    # The library's keyword list is an 18-way alternation that crawls over long text; these few literals, on the
    # lower-cased text, find a superset of its lines ten times faster (and the library's own patterns decide).
    lowered = text.lower()
    hints = KEYWORD_HINT.finditer(lowered) if len(lowered) == len(text) else KEYWORD_HINT_ANY_CASE.finditer(text)
    for hint in hints:
        start = text.rfind("\n", 0, hint.start()) + 1
        if start in seen:
            continue
        seen.add(start)
        end = text.find("\n", hint.end())
        line = text[start : end if end >= 0 else len(text)]
        if not detectors.keyword_names.search(line):
            continue
        yield from detectors.keyword.analyze_string(line, denylist_regex_to_group=detectors.quoted_config)
        if CONFIG_LINE.match(line):
            for value in detectors.keyword.analyze_string(line, denylist_regex_to_group=detectors.keyword_config):
                if TOKEN_LIKE.match(value):
                    yield value


def _worth_masking(detectors: _Detectors, value: str) -> bool:
    return (
        len(value) >= MIN_SECRET_CHARS
        and not DOTTED_NAME.match(value)
        and not any(check(value) for check in detectors.filters)
    )


def strings(value: Any) -> Iterator[str]:
    """Every string in a JSON-like value (keys too: an argument's name can carry a token)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from strings(item)


def find_in(values: Iterable[str]) -> list[Hit]:
    """The hits in several strings, each value once, longest first."""
    merged: dict[str, str] = {}
    for text in values:
        for hit in find(text):
            merged.setdefault(hit.value, hit.kind)
    return sorted((Hit(kind, value) for value, kind in merged.items()), key=lambda h: len(h.value), reverse=True)


def mask(value: Any, hits: Iterable[Hit]) -> Any:
    """`value` with every hit's value replaced by the redaction marker."""
    return redaction.scrub(value, [hit.value for hit in hits])


def masked(text: str) -> str:
    """`text` with every credential the scan finds in it masked."""
    hits = find(text)
    return str(mask(text, hits)) if hits else text


def kinds(hits: Iterable[Hit]) -> list[str]:
    """What an audit record may say about the hits: their kinds, never their values."""
    return sorted({hit.kind for hit in hits})
