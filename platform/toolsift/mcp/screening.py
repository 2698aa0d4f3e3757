"""Screening of third-party tool text before it can reach a prompt.

An MCP server's descriptions are untrusted: they land verbatim in the model's context. A
definition that reads like instructions to the model (hidden directives, requests to read
secrets or to call other tools) or that hides text in invisible Unicode is flagged, and a
flagged tool stays out of selection until an admin approves that exact content. This is a
tripwire for review, not a proof of safety: approval is the decision, the screen only asks.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

# Code points that render as nothing (or reorder text) yet reach the model: zero-width
# characters, bidirectional controls, the tag block (invisible ASCII look-alikes), BOM,
# interlinear annotation marks, and variation selectors, which can carry a byte each after
# an emoji ("emoji smuggling"). One text or emoji presentation selector (U+FE0E, U+FE0F)
# after a visible character is how a plain emoji is spelt (❤️), so that alone is not flagged.
_INVISIBLE = re.compile(
    "[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e"
    "\u2060-\u206f\u3164\ufe00-\ufe0d\ufeff\uffa0\ufff9-\ufffb\U000e0000-\U000e007f"
    "\U000e0100-\U000e01ef]"
    "|(?:^|(?<=[\ufe00-\ufe0f]))[\ufe0e\ufe0f]"
)

_RULES: list[tuple[str, re.Pattern[str]]] = [
    (
        "directive",
        re.compile(
            r"\b(ignore|disregard|forget|override)\b.{0,40}\b(previous|prior|above|earlier|all|"
            r"other|system)\b.{0,40}\b(instructions?|prompts?|rules?|messages?|directives?)\b"
        ),
    ),
    (
        "directive",
        re.compile(
            r"<\s*/?\s*(important|system|instructions?|admin|secret|hidden)\b[^>]*>"
            r"|\[\s*(system|inst)\s*\]|<<\s*sys\s*>>"
        ),
    ),
    (
        "directive",
        re.compile(
            r"\b(do not|don't|never)\b.{0,30}\b(tell|mention|inform|reveal to|show)\b.{0,20}"
            r"\b(the )?(user|human|operator)\b"
        ),
    ),
    (
        "directive",
        re.compile(
            r"\b(you are now|from now on|new instructions|act as (an?|the) )|"
            r"\b(assistant|model|ai|llm|agent)\b.{0,20}\b(must|should|shall)\b.{0,10}\b(always|first|"
            r"instead|secretly|silently)\b"
        ),
    ),
    (
        # Paths to keys and credentials have no business in a tool's description at all.
        "secrets",
        re.compile(
            r"~/\.ssh|\bid_(rsa|ed25519|ecdsa)\b|/etc/(passwd|shadow)\b|\.aws/credentials"
            r"|~/\.netrc|\.git-credentials"
        ),
    ),
    (
        # Asking for the conversation or the prompt itself to be sent or shown.
        "exfiltration",
        re.compile(
            r"\b(output|print|reveal|repeat|show|include|send|leak|share|return)\b.{0,30}"
            r"\bsystem prompt\b"
            r"|\b(send|post|upload|forward|include|leak|share|copy|attach)\s+(the|your|this|all)\s+"
            r"(full |whole |entire |complete )?(conversation|chat history|message history|"
            r"previous messages)\b"
        ),
    ),
    (
        "secrets",
        re.compile(
            r"\b(read|cat|open|send|include|print|reveal|exfiltrate|upload|pass|copy|attach)\b"
            r".{0,60}(~/\.ssh|id_rsa|\.env\b|/etc/passwd|/etc/shadow|\.aws/|credentials?|"
            r"api[ _-]?keys?|secrets?|passwords?|private[ _-]?keys?|access[ _-]?tokens?|"
            r"bearer tokens?|environment variables?|mcp\.json|\.netrc)"
        ),
    ),
    (
        "other_tools",
        re.compile(
            r"\b(before|after|instead of|first|also|always)\b.{0,40}\b(call|invoke|use|run|"
            r"execute|trigger)\b.{0,30}\b(the |another |other |any )?\w*[ _-]?(tools?|functions?)\b"
            r"|\b(call|invoke|run|execute)\b.{0,20}\b(the )?(tool|function)\b\s*[`'\"]?[A-Za-z_][\w.-]*"
            # "you must call `delete_all_records` first": an order to call a named thing.
            r"|\b(must|always|first|before)\b.{0,30}\b(call|invoke|run|execute|use)\b\s*[`'\"]"
            r"[a-z][\w .-]{0,60}[`'\"]"
        ),
    ),
]


@dataclass(frozen=True)
class Finding:
    """Why a definition was flagged: the rule, where, and a short excerpt for the reviewer."""

    rule: str
    field: str
    excerpt: str

    def as_dict(self) -> dict[str, str]:
        return {"rule": self.rule, "field": self.field, "excerpt": self.excerpt}


def screen(definition: Mapping[str, Any]) -> list[Finding]:
    """Findings for one MCP tool definition (name, title, description, schemas, annotations).

    Every string in the definition is read, property descriptions and enum values included:
    a directive hidden in a parameter description reaches the model just the same.
    """
    findings: list[Finding] = []
    seen: set[tuple[str, str]] = set()
    for field, value in _strings(definition, ""):
        for finding in _screen_text(field, value):
            if (finding.rule, finding.field) not in seen:
                seen.add((finding.rule, finding.field))
                findings.append(finding)
    return findings


def _screen_text(field: str, value: str) -> Iterator[Finding]:
    if match := _INVISIBLE.search(value):
        yield Finding("invisible_unicode", field, f"U+{ord(match.group()):04X} at {match.start()}")
    # NFKC folds full-width and other look-alike letters before the word rules run.
    folded = unicodedata.normalize("NFKC", _INVISIBLE.sub("", value)).lower()
    # `ignore_all_previous_instructions` and `<important_note>` read as words too.
    folded = re.sub(r"[\s_]+", " ", folded)
    for rule, pattern in _RULES:
        if match := pattern.search(folded):
            yield Finding(rule, field, _excerpt(folded, match.start(), match.end()))


def _excerpt(text: str, start: int, end: int) -> str:
    snippet = text[max(0, start - 20) : min(len(text), end + 20)]
    return snippet[:160]


def _strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield path or "(root)", value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            child = f"{path}.{key}" if path else str(key)
            if isinstance(key, str) and path:
                # Property names reach the prompt too.
                yield f"{child}(name)", key
            yield from _strings(item, child)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _strings(item, f"{path}[{index}]")
