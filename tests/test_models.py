"""Model resolution and the tokenizer/model disk cache, on the real bundled gguf files."""

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from guardrail.models import cache_dir, load_model, load_tokenizer, model_directory, resolve_model

SAMPLES = [
    "Hello, world!",
    "  two leading spaces, trailing tab\t",
    "naïve café — 你好世界 🙂 👩\u200d👩\u200d👧",
    "line\n\nbreaks\r\nand <b>tags</b>",
    "<start_of_turn>user\nhi<end_of_turn>",
    "<|im_start|>assistant\nok<|im_end|>",
]


def test_unknown_model_is_named_in_the_error():
    with pytest.raises(ValueError, match="'no-such-model'.*smollm2.*gemma3"):
        resolve_model("no-such-model")


def test_missing_gguf_file_is_named(tmp_path):
    missing = tmp_path / "absent.gguf"
    with pytest.raises(ValueError, match="absent.gguf"):
        resolve_model(str(missing))


def test_directory_without_config_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="config.json"):
        resolve_model(str(tmp_path))


def test_bundled_models_resolve_to_gguf_files():
    smollm2 = resolve_model("smollm2")
    assert smollm2.path.is_file() and smollm2.gguf_file == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert smollm2.chat  # instruct model with a chat template
    gemma3 = resolve_model("gemma3")
    assert gemma3.path.is_file() and gemma3.path.parent == cache_dir() / "models"
    assert not gemma3.chat  # base model: raw completion
    local = resolve_model(str(smollm2.path))  # the same file given as a path
    assert (local.directory, local.gguf_file, local.chat) == (smollm2.directory, smollm2.gguf_file, True)


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("GUARDRAIL_CACHE_DIR", str(tmp_path))
    assert cache_dir() == tmp_path


def _assert_same_tokenizer(cached, reference):
    for text in SAMPLES:
        assert cached.encode(text, add_special_tokens=False) == reference.encode(text, add_special_tokens=False)
        assert cached.encode(text) == reference.encode(text)  # same BOS handling
    assert cached.all_special_ids == reference.all_special_ids
    assert cached.eos_token_id == reference.eos_token_id
    assert len(cached) == len(reference)
    assert cached.chat_template == reference.chat_template


@pytest.mark.slow  # reads the GGUF model file
def test_cached_smollm2_tokenizer_matches_the_gguf_one(monkeypatch, tmp_path):
    monkeypatch.setenv("GUARDRAIL_CACHE_DIR", str(tmp_path))
    source = resolve_model("smollm2")
    gguf_reads = []  # the gguf files AutoTokenizer converted (a cache miss)
    from_pretrained = AutoTokenizer.from_pretrained

    def counting(*args, **kwargs):
        if kwargs.get("gguf_file"):
            gguf_reads.append(kwargs["gguf_file"])
        return from_pretrained(*args, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(AutoTokenizer, "from_pretrained", counting)
        first = load_tokenizer("smollm2")  # converts the gguf and writes the cache entry
        assert gguf_reads == [source.gguf_file]
        cached = load_tokenizer("smollm2")
    # The warm load came from the cache entry: no second conversion (speed is bench/'s), no second entry.
    assert gguf_reads == [source.gguf_file]

    assert [p.name.split("-")[0] for p in (tmp_path / "tokenizers").iterdir()] == ["smollm2"]
    reference = AutoTokenizer.from_pretrained(source.directory, gguf_file=source.gguf_file)
    _assert_same_tokenizer(first, reference)
    _assert_same_tokenizer(cached, reference)
    messages = [{"role": "user", "content": "Hi"}]
    assert cached.apply_chat_template(messages, tokenize=False) == reference.apply_chat_template(
        messages, tokenize=False
    )


@pytest.mark.slow
def test_cached_gemma3_tokenizer_matches_the_gguf_one(gemma3_tokenizer):
    source = resolve_model("gemma3")
    reference = AutoTokenizer.from_pretrained(source.directory, gguf_file=source.gguf_file)
    _assert_same_tokenizer(gemma3_tokenizer, reference)


@pytest.mark.slow
def test_model_loads_in_eval_mode_in_float32(smollm2_model):
    assert not smollm2_model.training
    assert smollm2_model.dtype == torch.float32
    assert smollm2_model.config.vocab_size == 49152


@pytest.mark.slow
def test_cached_model_computes_the_same_logits_as_the_gguf(smollm2_model, smollm2_tokenizer):
    source = resolve_model("smollm2")
    reference = AutoModelForCausalLM.from_pretrained(
        source.directory, gguf_file=source.gguf_file, dtype=torch.float32
    ).eval()
    ids = torch.tensor([smollm2_tokenizer.encode("The capital of France is")])
    with torch.no_grad():
        assert torch.equal(smollm2_model(ids).logits, reference(ids).logits)


@pytest.mark.slow
def test_converted_directory_names_its_architecture_and_keeps_the_tied_embedding(smollm2_model):
    # What vLLM needs to load the directory as it is (docs/vllm.md): the model class, and the tied
    # embedding under the input embedding's name (vLLM ignores a lone lm_head.weight).
    from safetensors import safe_open

    directory = model_directory("smollm2")
    config = json.loads((directory / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["tie_word_embeddings"]
    with safe_open(str(directory / "model.safetensors"), "pt") as weights:
        names = set(weights.keys())
        assert "model.embed_tokens.weight" in names and "lm_head.weight" not in names
        embedding = weights.get_tensor("model.embed_tokens.weight")
    assert torch.equal(embedding, smollm2_model.get_input_embeddings().weight)
    assert smollm2_model.get_output_embeddings().weight.data_ptr() == smollm2_model.get_input_embeddings().weight.data_ptr()


@pytest.mark.slow
def test_load_model_honours_dtype():
    model = load_model("smollm2", dtype=torch.bfloat16)
    assert model.dtype == torch.bfloat16 and not model.training
