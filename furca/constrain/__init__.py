"""Constrained decoding: regex / JSON schema / grammar / choices -> per-token masks.

    info = TokenizerInfo.from_tokenizer_json(path, eos_token="...")   # or from_huggingface
    compiler = GrammarCompiler(info)
    g = compiler.compile_regex(r"\\d+")          # or compile_grammar / _choices / _json_schema /
                                                 #    _json_object / _structural_tag
    m = g.matcher()
    m.fill_bitmask(bitmask, row=0); m.accept_token(t); m.is_terminated(); m.jump_forward()

    with compile_deadline(2.0):                  # this thread's compiles stop past 2 s:
        compiler.compile_json_schema(schema)     # CompileTimeout (a CompileError), nothing cached

A leaf package: imports only furca.errors, numpy, lark (torch lazily, in
apply_token_bitmask_). See DESIGN.md beside this file.
"""

from furca.errors import CompileError

from .bitmask import allocate_token_bitmask, apply_token_bitmask_, unpack_bitmask
from .compiler import GrammarCompiler
from .deadline import CompileTimeout, compile_deadline
from .compiled import CompiledGrammar
from .matcher import Matcher
from .tokenizer import TokenizerInfo

__all__ = [
    "CompileError",
    "CompileTimeout",
    "CompiledGrammar",
    "GrammarCompiler",
    "Matcher",
    "TokenizerInfo",
    "allocate_token_bitmask",
    "apply_token_bitmask_",
    "compile_deadline",
    "unpack_bitmask",
]
