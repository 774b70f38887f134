"""Attention backends: one interface (base.AttentionBackend), a plain-torch
implementation (CPU and reference) and, later, a Triton one (CUDA)."""
