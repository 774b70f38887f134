"""Attention backends: the interface models call (`furca.runtime.forward_batch.AttentionBackend`),
the registry that names and builds them (`registry`), and one module per backend
(``<name>_backend.py``: ``torch``, plain torch for CPU and reference; ``triton``, the
CUDA kernels)."""
