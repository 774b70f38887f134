"""Lark grammar syntax -> grammar IR.

The grammar definition is parsed by lark itself (``lark.load_grammar``, so ``%import
common.X``, templates, ``?rule`` and EBNF operators behave as in Lark); its compiled BNF
rules become IR rules, terminals become their regex (lark's own pattern text, parsed by
our regex front end). ``%ignore`` terminals may appear before and after every terminal.
Differences from Lark's parser: terminals are matched as a context-free byte language,
without Lark's longest-match lexer or terminal priorities (a superset where they collide).

Grammars come from requests, so they never touch the filesystem: ``%import common.X``
(lark's own common.lark, read once from the installed lark package) is the only import.
Every other import (a relative ``%import .x.y``, another module, lark's other bundled
grammars) is refused with a `CompileError` that names no path, before anything is
opened: `_BundledOnly` is the first entry of lark's ``import_paths`` (a callable loader,
lark's own hook) and raises a non-IOError, so lark never falls back to its other sources
(the grammar's directory, the cwd, its package).
"""

from __future__ import annotations

from furca.errors import CompileError

from . import ir
from .deadline import check as check_deadline
from .regex import parse_regex

IGNORE_RULE = "__furca_ignore"
# lark's common.lark terminals written with lookbehind (not regular as written): the
# language they lex, as a plain regex (a string whose inner quotes are escaped)
_COMMON_REWRITES = {"ESCAPED_STRING": r'"(?:[^"\\\n]|\\[^\n])*"'}
ROOT_RULE = "__furca_root"


IMPORT_REFUSED = ("Lark grammar: %import may only name lark's common grammar (%import common.NAME or "
                  "%import common (NAME, ...)); other imports are not allowed")


class _ImportRefused(Exception):
    """Raised by `_BundledOnly`: not an IOError, so lark tries no other import source."""


_COMMON: list[str] = []  # common.lark's text, read once


def _common_text() -> str:
    if not _COMMON:
        import pkgutil

        data = pkgutil.get_data("lark", "grammars/common.lark")
        if data is None:
            raise CompileError("Lark grammar: lark's common.lark is not available")
        _COMMON.append(data.decode("utf-8"))
    return _COMMON[0]


class _BundledOnly:
    """lark's import-path hook: ``(base_path, grammar_path) -> (name, text)``. base_path is
    None for a library import (``%import common.X``) and the importing grammar's location
    for a relative one; only the library import of ``common`` resolves."""

    def __call__(self, base_path, grammar_path):
        if base_path is None and grammar_path == "common.lark":
            return "<lark:common.lark>", _common_text()
        raise _ImportRefused()


_LOADER = _BundledOnly()


def parse_lark(text: str, start: str = "start") -> ir.Grammar:
    try:
        from lark.exceptions import LarkError
        from lark.load_grammar import load_grammar

        grammar, _ = load_grammar(text, "<grammar>", [_LOADER], False)
        terminals, rules, ignore = grammar.compile([start], set())
    except _ImportRefused:
        raise CompileError(IMPORT_REFUSED) from None
    except LarkError as e:
        raise CompileError(f"Lark grammar: {str(e).strip()}") from None
    except KeyError as e:
        raise CompileError(f"Lark grammar: undefined symbol {e}") from None
    except (OSError, AssertionError, RuntimeError) as e:  # lark's own checks; never a path in the message
        raise CompileError(f"Lark grammar: {type(e).__name__}: the grammar could not be loaded") from None
    out = {}
    term_names = set()
    for t in terminals:
        check_deadline()
        p = t.pattern
        flags = "".join(f for f in sorted(p.flags) if f in "is")
        if set(p.flags) - set("ismu"):
            raise CompileError(f"Lark grammar: terminal {t.name} uses unsupported regex flags {sorted(p.flags)}")
        if type(p).__name__ == "PatternStr" and not flags:
            body = ir.literal(p.value)
        elif t.name.lstrip("_") in _COMMON_REWRITES and "(?<!" in p.value:
            body = parse_regex(_COMMON_REWRITES[t.name.lstrip("_")], what=f"Lark terminal {t.name}")
        else:
            src = p.value if type(p).__name__ == "PatternRE" else _escape(p.value)
            body = parse_regex(f"(?{flags}:{src})" if flags else src, what=f"Lark terminal {t.name}")
        if ignore:
            body = ir.seq([body, ("rep", ("ref", IGNORE_RULE, 0), 0, None)])
        out["T:" + t.name] = body
        term_names.add(t.name)
    if ignore:
        missing = [n for n in ignore if n not in term_names]
        if missing:
            raise CompileError(f"Lark grammar: %ignore names unknown terminal {missing[0]}")
        ign = {t.name: t for t in terminals}
        alts = []
        for n in ignore:
            p = ign[n].pattern
            alts.append(parse_regex(p.value if type(p).__name__ == "PatternRE" else _escape(p.value),
                                    what=f"Lark terminal {n}"))
        out[IGNORE_RULE] = ir.alt(alts)
    for r in rules:
        check_deadline()
        name = r.origin.name
        items = [("ref", ("T:" + s.name) if s.is_term else s.name, 0) for s in r.expansion]
        e = ir.seq(items) if items else ir.EMPTY
        out[name] = ir.alt([out[name], e]) if name in out else e
    if start not in out:
        raise CompileError(f"Lark grammar: no start rule {start!r}")
    root = start
    if ignore:
        out[ROOT_RULE] = ir.seq([("rep", ("ref", IGNORE_RULE, 0), 0, None), ("ref", start, 0)])
        root = ROOT_RULE
    return ir.Grammar(out, root)


def _escape(s):
    import re

    return re.escape(s)
