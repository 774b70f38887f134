"""Backends: where a program's gens and selects run. See `base.py` for the protocol.

`local` (furca's in-process Engine), `runtime_endpoint` (SGLang's native API over
HTTP), `runtime` (a `furca serve` subprocess), `openai_backend` (any
OpenAI-compatible endpoint). Each loads its heavy dependency when created.
"""
