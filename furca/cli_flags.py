"""Command-line flags derived from a config dataclass's fields, and the flag table of the docs.

`EngineConfig` keeps each option's help text next to its field
(``field(metadata={"help": ..., "flag": ..., "choices": ...})``); `add_config_arguments`
turns every field into one flag, so `furca serve` and `furca generate` cannot miss an
engine option, and `config_kwargs` reads the values back by field name. Rules:

- a field ``some_name`` becomes ``--some-name`` unless its metadata names the ``flag``;
- a bool that defaults to False is a switch that sets it (``--disable-radix-cache``); one
  that defaults to True is a switch that clears it (``--disable-jump-forward`` for
  ``enable_jump_forward``, else ``--no-some-name``);
- other fields take one value of the field's type (``int | None`` -> int), with the
  field's ``choices`` when it has some; the dataclass validates the values.

`markdown_table(parser)` renders a parser's flags as the table `docs/server.md` carries
(``python -m furca.cli_flags`` prints the one of ``furca serve``); a test keeps the two equal.

Imports only the standard library: building the parser must stay instant (`furca --help`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import typing
from typing import Any

_SCALARS = {int: int, float: float, str: str}
_METAVARS = {int: "N", float: "X", str: "NAME"}


def _value_type(cls: type, f: dataclasses.Field) -> type:
    hint = typing.get_type_hints(cls)[f.name]
    args = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
    if len(args) != 1 or args[0] not in (*_SCALARS, bool):
        raise TypeError(f"{cls.__name__}.{f.name}: no command-line form for {hint!r}")
    return args[0]


def flag_name(f: dataclasses.Field) -> str:
    """The flag of field `f` (see the module's rules)."""
    if "flag" in f.metadata:
        return f.metadata["flag"]
    if f.default is True:
        if f.name.startswith("enable_"):
            return "--disable-" + f.name[len("enable_"):].replace("_", "-")
        return "--no-" + f.name.replace("_", "-")
    return "--" + f.name.replace("_", "-")


def _default_text(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, (tuple, list)):
        return ",".join(str(v) for v in value) or "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def add_config_arguments(parser: argparse.ArgumentParser | Any, cls: type, *, skip: tuple[str, ...] = ()) -> None:
    """One flag per field of dataclass `cls` (not those in `skip`); ``dest`` is the field's
    name, its default the field's default."""
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        if "help" not in f.metadata:
            raise TypeError(f"{cls.__name__}.{f.name} has no help text (field metadata 'help')")
        help_text = f.metadata["help"].replace("%", "%%")
        kind = _value_type(cls, f)
        if kind is bool:  # a switch: off unless given
            parser.add_argument(flag_name(f), dest=f.name, default=f.default,
                                action="store_false" if f.default else "store_true",
                                help=f"turns {f.name} off: {help_text}" if f.default else help_text)
            continue
        choices = f.metadata.get("choices")
        if "default" not in help_text:
            help_text += f" (default: {_default_text(f.default)})"
        parser.add_argument(flag_name(f), dest=f.name, default=f.default, type=_SCALARS[kind],
                            choices=list(choices) if choices else None,
                            metavar=None if choices else _METAVARS[kind], help=help_text)


def config_kwargs(namespace: argparse.Namespace, cls: type) -> dict[str, Any]:
    """The value of every field of `cls` from parsed flags, by field name."""
    return {f.name: getattr(namespace, f.name) for f in dataclasses.fields(cls)}


def string_list(text: str) -> tuple[str, ...]:
    """A flag's list value: a JSON list (vLLM's form, ``'["http://a", "http://b"]'``) or
    comma-separated items."""
    text = text.strip()
    if text.startswith("["):
        try:
            items = json.loads(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(f"not a JSON list: {text!r} ({e})") from None
        if not isinstance(items, list) or not all(isinstance(i, str) and i for i in items):
            raise argparse.ArgumentTypeError(f"not a JSON list of non-empty strings: {text!r}")
        return tuple(items)
    return tuple(item.strip() for item in text.split(",") if item.strip())


# -- the docs' flag table -------------------------------------------------------------------


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def markdown_table(parser: argparse.ArgumentParser) -> str:
    """Every optional flag of `parser` (not -h): ``| flag | default | meaning |``."""
    rows = ["| flag | default | meaning |", "|---|---|---|"]
    for action in parser._actions:  # noqa: SLF001 - argparse has no public list of its actions
        if not action.option_strings or isinstance(action, argparse._HelpAction):  # noqa: SLF001
            continue
        flags = ", ".join(f"`{s}`" for s in action.option_strings)
        if action.choices:
            flags += " {" + ",".join(str(c) for c in action.choices) + "}"
        elif action.nargs != 0:
            flags += f" {action.metavar or action.dest.upper()}"
        help_text = (action.help or "").replace("%%", "%")
        default = help_text.rsplit(" (default: ", 1)
        if len(default) == 2 and default[1].endswith(")"):
            help_text, default_text = default[0], default[1][:-1]
        else:
            default_text = _default_text(action.default)
            if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):  # noqa: SLF001
                default_text = "off"  # a switch is off unless given
        rows.append(f"| {_cell(flags)} | {_cell(default_text)} | {_cell(help_text)} |")
    return "\n".join(rows)


def serve_parser() -> argparse.ArgumentParser:
    """The parser of ``furca serve``."""
    from furca.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))  # noqa: SLF001
    return sub.choices["serve"]


if __name__ == "__main__":
    print(markdown_table(serve_parser()))
