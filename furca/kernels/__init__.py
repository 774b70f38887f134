"""Triton kernels, one operation per module, each beside its plain-torch reference:

- ``decode_attention``: one query token per request over its paged KV (split-KV).
- ``extend_attention``: new tokens over a cached prefix (paged) and causally over
  themselves; plain prefill when the prefix is empty.
- ``store_kv``: scatter new K/V rows into their pool slots.
- ``token_bitmask``: apply an int32 token bitmask to logits in place.
- ``dequant_matmul``: ``x @ w.T`` from int4 / int8 / fp8 weights (weight-only
  quantization), in the layouts ``dequant_pack`` makes of a ``QuantGroups``.

Importing this package (or any kernel module) never fails when Triton is missing: the
``*_ref`` functions still run and a kernel launch raises ``KernelUnavailableError``.
Set ``TRITON_INTERPRET=1`` before importing a kernel module to run it on the CPU.
"""
