"""Grammars from requests never touch the filesystem.

Lark's ``%import`` resolves only ``common.X`` (lark's own common.lark); everything else
(relative, cwd, parent dir, lark's other bundled grammars) is refused with a CompileError
that names no path, before any file is opened. GBNF and regexes open nothing either.
Watched with a Python audit hook: every "open" event of this thread while compiling.
"""

from __future__ import annotations

import sys
import threading

import pytest

from furca.constrain import CompileError
from furca.constrain.lark_grammar import IMPORT_REFUSED

from .conftest import BYTE_EOS, walk_ids

SECRET = "furca-planted-secret-7f3a"


class _Opens:
    """Paths opened (audit events "open", "os.listdir", "os.scandir") by the watching thread."""

    def __init__(self):
        self.thread = None
        self.seen: list = []

    def __call__(self, event, args):
        if self.thread is not None and event in ("open", "os.listdir", "os.scandir") \
                and threading.get_ident() == self.thread:
            self.seen.append((event, args[0] if args else None))

    def __enter__(self):
        self.seen = []
        self.thread = threading.get_ident()
        return self

    def __exit__(self, *exc):
        self.thread = None


_OPENS = _Opens()
sys.addaudithook(_OPENS)  # audit hooks stay for the process: it records only inside `with _OPENS`


@pytest.fixture
def planted(tmp_path, monkeypatch):
    """cwd = tmp_path/work; grammar files with SECRET in the cwd, a subdir and the parent,
    and a `common.lark` in the cwd that would shadow lark's own."""
    work = tmp_path / "work"
    (work / "out").mkdir(parents=True)
    rule = f'secret: "{SECRET}"\nSECRET: "{SECRET}"\n'
    (work / "out" / "probe_secret.lark").write_text(rule)
    (work / "probe.lark").write_text(rule)
    (tmp_path / "parent_secret.lark").write_text(rule)
    (work / "common.lark").write_text(f'WS: "{SECRET}"\nNUMBER: "{SECRET}"\n')
    (work / "grammars").mkdir()
    (work / "grammars" / "python.lark").write_text(rule)
    monkeypatch.chdir(work)
    return tmp_path


@pytest.fixture(scope="module")
def warm(byte_compiler):
    """Imports lark and the Lark front end and reads common.lark once (module imports open
    files; a request's compile afterwards must open none)."""
    byte_compiler.compile_grammar("%import common.WS\nstart: \"a\" WS?", syntax="lark")
    byte_compiler.compile_grammar('root ::= "a"')
    byte_compiler.compile_regex("a+")
    byte_compiler.compile_json_schema({"type": "object", "properties": {"a": {"$ref": "#/$defs/x"}},
                                       "$defs": {"x": {"type": "string", "format": "date"}}})
    return byte_compiler


HOSTILE_IMPORTS = [
    "%import .out.probe_secret.secret\nstart: secret",           # relative to the grammar (the cwd)
    "%import .out.probe_secret (secret)\nstart: secret",         # multi-import form
    "%import .out.probe_secret.secret -> s\nstart: s",           # aliased
    "%import out.probe_secret.secret\nstart: secret",            # library form, a path under the cwd
    "%import probe.secret\nstart: secret",                       # a file in the cwd
    "%import .probe.SECRET\nstart: SECRET",
    "%import ..parent_secret.secret\nstart: secret",             # the parent directory
    "%import .parent_secret.secret\nstart: secret",
    "%import /etc/passwd\nstart: \"a\"",                          # an absolute path
    "%import etc.passwd.x\nstart: x",
    "%import python.NAME\nstart: NAME",                          # lark's other bundled grammars
    "%import lark.RULE\nstart: RULE",
    "%import unicode.LETTER\nstart: LETTER",
    "%import grammars.python.NAME\nstart: NAME",
    "%import common.common.WS\nstart: WS",
    "%import os.path\nstart: path",                              # a stdlib module's name
    "%import encodings.idna.x\nstart: x",
]


@pytest.mark.parametrize("text", HOSTILE_IMPORTS)
def test_imports_other_than_common_are_refused_without_opening_anything(planted, warm, text, caplog):
    with _OPENS as opens, pytest.raises(CompileError) as e:
        warm.compile_grammar(text, syntax="lark")
    assert opens.seen == []
    msg = str(e.value)
    assert str(planted) not in msg and "/" not in msg.replace("/etc/passwd", "") and SECRET not in msg
    assert ".lark" not in msg.replace("common.lark", "")
    assert not [r for r in caplog.records if r.levelname in ("ERROR", "CRITICAL")]


def test_relative_import_message_is_the_refusal(planted, warm):
    with pytest.raises(CompileError) as e:
        warm.compile_grammar("%import .out.probe_secret.secret\nstart: secret", syntax="lark")
    assert str(e.value) == IMPORT_REFUSED  # the same answer whether the file exists or not
    with pytest.raises(CompileError) as e2:
        warm.compile_grammar("%import .out.no_such_file.secret\nstart: secret", syntax="lark")
    assert str(e2.value) == IMPORT_REFUSED


def _accepts(compiler, g, text: str) -> bool:
    return walk_ids(g.matcher(), list(text.encode()) + [BYTE_EOS], compiler.info)


@pytest.mark.parametrize("text,ok,bad", [
    ('%import common.WS\nstart: "a" WS "b"', "a \t b", f"a{SECRET}b"),
    ('%import common (NUMBER, WS)\nstart: NUMBER WS NUMBER', "12 3.5", f"1{SECRET}2"),
    ('%import common.ESCAPED_STRING\n%import common.WS\n%ignore WS\nstart: "[" ESCAPED_STRING "]"', '[ "x\\"y" ]', "[x]"),
    ('%import common.CNAME -> NAME\nstart: NAME', "abc_1", "1abc"),
])
def test_common_imports_still_work_and_come_from_lark(planted, warm, text, ok, bad):
    """A common.lark in the cwd does not shadow lark's own; nothing is opened."""
    with _OPENS as opens:
        g = warm.compile_grammar(text, syntax="lark")
    assert opens.seen == []
    assert _accepts(warm, g, ok)
    assert not _accepts(warm, g, bad)
    assert not _accepts(warm, g, SECRET)


@pytest.mark.parametrize("kind,text", [
    ("gbnf", 'root ::= "/etc/passwd" | "../out/probe_secret.lark"'),
    ("gbnf", 'root ::= [a-z]+ "." ext\next ::= "lark" | "json"'),
    ("regex", r"(/[a-z_.]+)+"),
    ("regex", r"\.\./out/probe_secret\.lark"),
    ("json", '{"type": "object", "properties": {"$ref": {"$ref": "file:///etc/passwd"}}}'),
])
def test_gbnf_regex_and_schemas_open_nothing(planted, warm, kind, text):
    with _OPENS as opens:
        try:
            if kind == "gbnf":
                warm.compile_grammar(text)
            elif kind == "regex":
                warm.compile_regex(text)
            else:
                warm.compile_json_schema(text)
        except CompileError as e:
            assert str(planted) not in str(e)
    assert opens.seen == []


def test_the_audit_hook_sees_opens(planted):
    """The watch itself works: a plain open inside it is recorded."""
    with _OPENS as opens:
        with open("probe.lark") as f:
            f.read()
    assert any(str(p).endswith("probe.lark") for _, p in opens.seen)
