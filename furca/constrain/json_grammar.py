"""Fallback GBNF for JSON mode (any JSON value / any JSON object), used until / unless
``furca.constrain.json_schema`` provides ``json_value_gbnf()`` / ``json_object_gbnf()``.

whitespace="compact": no whitespace between tokens; "flexible": runs of at most
``max_whitespace`` of space / newline / tab between tokens (bounded, so a model cannot
loop on whitespace until max_tokens).
"""

_BODY = r'''
value ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" WS ( string WS ":" WS value WS ( "," WS string WS ":" WS value WS )* )? "}"
array ::= "[" WS ( value WS ( "," WS value WS )* )? "]"
string ::= "\"" char* "\""
char ::= [^"\\\x00-\x1f] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} )
number ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?
'''


def _ws(whitespace, max_whitespace):
    if whitespace == "compact":
        return 'WS ::= ""\n'
    if whitespace != "flexible":
        raise ValueError(f"whitespace must be 'compact' or 'flexible', got {whitespace!r}")
    return f"WS ::= [ \\n\\t]{{0,{int(max_whitespace)}}}\n"


def json_value_gbnf(whitespace="compact", max_whitespace=20):
    return "root ::= WS value WS\n" + _BODY + _ws(whitespace, max_whitespace)


def json_object_gbnf(whitespace="compact", max_whitespace=20):
    return "root ::= WS object WS\n" + _BODY + _ws(whitespace, max_whitespace)
