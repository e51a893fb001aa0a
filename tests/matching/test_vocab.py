"""TokenVocab: the bytes each token contributes, on the real bundled tokenizers."""

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import TokenizersBackend

from guardrail.matching.vocab import TokenizerFamily, TokenVocab, detect_family
from guardrail.models import load_tokenizer

MODELS = ["smollm2", "gemma3"]

# Pieces that have broken token-bytes tables before: multi-byte and astral characters, ZWJ emoji
# sequences, flags, combining marks, every kind of whitespace, and strings that look like the
# tokenizers' own spellings of bytes ("Ġ", "Ċ", "<0x41>", "▁" is left out on purpose, see below).
FRAGMENTS = [
    "hello", "Hello", " world", "WORLD", "don't", "e-mail", "42", "3.14",
    " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "\u00a0", "\u3000",
    "é", "ñ", "ü", "e\u0301", "Ångström", "ß", "İ", "Ω",
    "你好", "日本語のテキスト", "한국어", "ไทย", "العربية", "עברית", "Ελληνικά", "русский",
    "😀", "👍🏽", "👩\u200d👩\u200d👧", "🇫🇷", "🏳️\u200d🌈", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "𠜎", "\u200b", "\ufeff",
    "Ġ", "Ċ", "Ã©", "<0x41>", "<unk", "<|im", "▂", "\x00", "\x7f",
]

texts = st.lists(
    st.one_of(
        st.sampled_from(FRAGMENTS),
        st.text(st.characters(exclude_categories=("Cs",)), max_size=6),
    ),
    max_size=12,
).map("".join)


@pytest.fixture(scope="module", params=MODELS)
def model_name(request):
    return request.param


@pytest.fixture(scope="module")
def tokenizer(request, model_name):
    return request.getfixturevalue(f"{model_name}_tokenizer")


@pytest.fixture(scope="module")
def vocab(request, model_name):
    return request.getfixturevalue(f"{model_name}_vocab")


def joined_bytes(vocab, tokenizer, text):
    return b"".join(vocab.token_bytes[i] for i in tokenizer.encode(text, add_special_tokens=False))


@pytest.fixture(scope="module")
def representable(tokenizer, vocab):
    """Whether the tokenizer itself can spell ``text``; the documented exceptions (see TokenVocab) are
    literal special-token strings, U+2581 for SentencePiece-style tokenizers (their spelling of a
    space), and bytes without a single-byte token (SmolLM2 lacks 0x04, 0xF1, ...: BPE drops them)."""
    specials = set(tokenizer.convert_ids_to_tokens(sorted(vocab.special_ids)))
    if detect_family(tokenizer)[0] is TokenizerFamily.SENTENCEPIECE:
        specials.add("\u2581")
    single_bytes = {data[0] for data in vocab.token_bytes if len(data) == 1}

    def check(text):
        return not any(s in text for s in specials) and set(text.encode("utf-8")) <= single_bytes

    return check


@settings(max_examples=300, deadline=None)
@given(text=texts)
def test_token_bytes_of_any_encoding_spell_the_text(tokenizer, vocab, representable, text):
    assume(representable(text))
    assert joined_bytes(vocab, tokenizer, text) == text.encode("utf-8")


def test_bytes_without_a_token_are_dropped_by_the_tokenizer_not_by_us(smollm2_tokenizer, smollm2_vocab):
    # SmolLM2's vocab has no token for the byte 0xF1 (lead byte of U+40000..U+7FFFF): the tokenizer
    # loses it, so the model can never emit it either. The table is still exact for what is encoded.
    ids = smollm2_tokenizer.encode("\U00040000", add_special_tokens=False)
    assert joined_bytes(smollm2_vocab, smollm2_tokenizer, "\U00040000") == b"\x80\x80\x80"
    assert smollm2_tokenizer.decode(ids) == "\ufffd" * 3


@pytest.mark.parametrize(
    "text",
    [
        "Hello, world!",
        "  leading spaces",
        "trailing spaces   ",
        " ",
        "",
        "tabs\tand\nnewlines\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\nend",
        "accents: café naïve Ærøskøbing",
        "CJK split at byte level: 牛奶 你好世界 すし",
        "family 👨\u200d👩\u200d👧\u200d👦 flag 🇯🇵 astral 𝕏 𠜎",
        "<table><tr><td>html tags are plain added tokens in Gemma</td></tr></table>",
    ],
)
def test_round_trip_on_hand_picked_texts(tokenizer, vocab, text):
    assert joined_bytes(vocab, tokenizer, text) == text.encode("utf-8")


def test_a_multibyte_character_may_be_split_across_tokens(tokenizer, vocab):
    # Rare CJK/emoji fall back to bytes: some token must carry an incomplete UTF-8 sequence, the
    # reason the automaton decodes UTF-8 incrementally.
    ids = tokenizer.encode("𠜎𠜱𠝹𠱓", add_special_tokens=False)
    pieces = [vocab.token_bytes[i] for i in ids]
    assert any(_is_partial_utf8(piece) for piece in pieces)


def _is_partial_utf8(data):
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def test_gemma3_does_not_prepend_a_space(gemma3_tokenizer, gemma3_vocab):
    # Gemma 3's tokenizer has no add_dummy_prefix: "Hello" is the token "Hello", not "▁Hello", so a
    # completion's first word carries no invented space.
    assert detect_family(gemma3_tokenizer) == (TokenizerFamily.SENTENCEPIECE, False)
    assert not gemma3_vocab.prefix_space
    ids = gemma3_tokenizer.encode("Hello world", add_special_tokens=False)
    assert gemma3_vocab.token_bytes[ids[0]] == b"Hello"
    assert gemma3_vocab.token_bytes[ids[1]] == b" world"


def test_smollm2_is_byte_level(smollm2_tokenizer, smollm2_vocab):
    assert detect_family(smollm2_tokenizer) == (TokenizerFamily.BYTE_LEVEL, False)
    (space_world,) = smollm2_tokenizer.encode(" world", add_special_tokens=False)
    assert smollm2_vocab.token_bytes[space_world] == b" world"


@pytest.mark.parametrize(
    ("model", "control_tokens", "eos_tokens"),
    [
        ("smollm2", ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<repo_name>"], ["<|im_end|>", "<|endoftext|>"]),
        ("gemma3", ["<bos>", "<eos>", "<pad>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>",
                    "<unused0>", "<unused6241>"], ["<eos>", "<end_of_turn>"]),
    ],
)
def test_control_tokens_contribute_nothing(request, model, control_tokens, eos_tokens):
    tokenizer = request.getfixturevalue(f"{model}_tokenizer")
    vocab = request.getfixturevalue(f"{model}_vocab")
    ids = tokenizer.convert_tokens_to_ids(control_tokens)
    assert set(ids) <= vocab.special_ids
    assert all(vocab.token_bytes[i] == b"" for i in vocab.special_ids)
    assert set(tokenizer.convert_tokens_to_ids(eos_tokens)) <= vocab.eos_ids


def test_user_defined_added_tokens_contribute_their_text(gemma3_tokenizer, gemma3_vocab):
    # The gguf marks Gemma's HTML tags and image markers USER_DEFINED (not CONTROL): the tokenizer cuts
    # them out of plain text, so they are text, and a term may match across them.
    for literal in ["<table>", "</td>", "<start_of_image>", "[multimodal]", "\t", "\n" * 20]:
        (token_id,) = gemma3_tokenizer.encode(literal, add_special_tokens=False)
        assert gemma3_vocab.token_bytes[token_id] == literal.encode()
        assert token_id not in gemma3_vocab.special_ids


def test_table_covers_every_id(tokenizer, vocab):
    assert len(vocab.token_bytes) == len(tokenizer)
    # Only control tokens are empty: every other id spells at least one byte.
    assert {i for i, data in enumerate(vocab.token_bytes) if not data} == set(vocab.special_ids)


def test_fingerprint_differs_between_tokenizers(smollm2_vocab, gemma3_vocab):
    assert smollm2_vocab.fingerprint != gemma3_vocab.fingerprint
    assert len(smollm2_vocab.fingerprint) == 64


def test_fingerprint_is_stable_across_reloads(model_name, vocab):
    assert TokenVocab.from_tokenizer(load_tokenizer(model_name)).fingerprint == vocab.fingerprint


def test_fingerprint_changes_with_one_token(smollm2_vocab):
    table = list(smollm2_vocab.token_bytes)
    table[1000] += b"x"
    changed = TokenVocab.build(table, smollm2_vocab.special_ids, smollm2_vocab.eos_ids)
    assert changed.fingerprint != smollm2_vocab.fingerprint


def test_serialisation_round_trip(vocab):
    assert TokenVocab.from_bytes(vocab.to_bytes()) == vocab
    assert TokenVocab.from_arrays(vocab.to_arrays()) == vocab


def test_tampered_serialisation_is_rejected(smollm2_vocab):
    arrays = smollm2_vocab.to_arrays()
    arrays["blob"] = arrays["blob"].copy()
    arrays["blob"][123] ^= 1
    with pytest.raises(ValueError, match="fingerprint mismatch"):
        TokenVocab.from_arrays(arrays)


@pytest.mark.parametrize("blob", [b"", b"not an archive", b"\x80\x04\x95\x00cos\nsystem\n."])
def test_foreign_bytes_are_rejected_not_unpickled(blob):
    with pytest.raises(ValueError, match="TokenVocab"):
        TokenVocab.from_bytes(blob)


def test_object_arrays_are_refused(smollm2_vocab, tmp_path):
    # np.load(allow_pickle=False) must stay in force: an object array would unpickle on load.
    import io

    arrays = smollm2_vocab.to_arrays()
    arrays["special_ids"] = np.array([object()], dtype=object)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    with pytest.raises(ValueError):
        TokenVocab.from_bytes(buffer.getvalue())


def test_special_ids_must_be_empty():
    with pytest.raises(ValueError, match="special_ids"):
        TokenVocab.build([b"a", b"b"], special_ids=[1])


# -- tokenizers we do not bundle: built in memory with the tokenizers library -------------------------


def _byte_fallback_metaspace_tokenizer(prepend_scheme):
    vocab = {"<unk>": 0, "▁": 1, "H": 2, "i": 3, **{f"<0x{b:02X}>": 4 + b for b in range(256)}}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>", byte_fallback=True))
    backend.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme=prepend_scheme)
    backend.decoder = decoders.Sequence([decoders.Metaspace(prepend_scheme=prepend_scheme), decoders.ByteFallback()])
    return TokenizersBackend(tokenizer_object=backend, unk_token="<unk>")


def test_legacy_dummy_prefix_is_detected_and_recorded():
    # Llama 2 / Mistral style: encode("Hi") spells "▁Hi"; the vocab records it instead of hiding it.
    tokenizer = _byte_fallback_metaspace_tokenizer("first")
    vocab = TokenVocab.from_tokenizer(tokenizer)
    assert vocab.prefix_space
    assert joined_bytes(vocab, tokenizer, "Hi é") == b" " + "Hi é".encode()


def test_metaspace_without_prefix_round_trips():
    tokenizer = _byte_fallback_metaspace_tokenizer("never")
    vocab = TokenVocab.from_tokenizer(tokenizer)
    assert not vocab.prefix_space
    assert joined_bytes(vocab, tokenizer, "Hi é 🙂") == "Hi é 🙂".encode()
    assert vocab.fingerprint != TokenVocab.from_tokenizer(_byte_fallback_metaspace_tokenizer("first")).fingerprint


def test_unsupported_tokenizer_family_is_named():
    backend = Tokenizer(models.WordPiece(vocab={"[UNK]": 0, "hi": 1}, unk_token="[UNK]"))
    backend.decoder = decoders.WordPiece()
    with pytest.raises(ValueError, match="WordPiece"):
        TokenVocab.from_tokenizer(TokenizersBackend(tokenizer_object=backend, unk_token="[UNK]"))


@pytest.fixture(scope="module")
def user_defined_piece_tokenizer(tmp_path_factory):
    """A real SentencePiece model with user-defined pieces (trained here with ``sentencepiece``), loaded by
    transformers the way Mistral's SentencePiece tokenizers are: the config lists the pieces among the special
    tokens (so ``all_special_ids`` holds them), the tokenizer itself prints them as text."""
    import json
    import random

    import sentencepiece as spm
    from transformers import AutoTokenizer

    folder = tmp_path_factory.mktemp("spm")
    rng = random.Random(0)
    words = "the quick brown fox jumps over a lazy dog we assume you are fine see the fun duck".split()
    (folder / "corpus.txt").write_text("\n".join(" ".join(rng.choice(words) for _ in range(12)) for _ in range(400)))
    pieces = ["[REF]", "[/REF]", "[REFERENCE_DOC_19]"]
    spm.SentencePieceTrainer.train(input=str(folder / "corpus.txt"), model_prefix=str(folder / "tokenizer"),
                                   vocab_size=350, model_type="bpe", user_defined_symbols=pieces, byte_fallback=True,
                                   character_coverage=1.0, minloglevel=2)
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "LlamaTokenizer", "legacy": False, "add_bos_token": False,
        "additional_special_tokens": pieces}))
    converted = folder / "converted"
    AutoTokenizer.from_pretrained(str(folder)).save_pretrained(str(converted))
    spec = json.loads((converted / "tokenizer.json").read_text())
    for token in spec["added_tokens"]:
        token["special"] = token["content"] not in pieces  # as sentencepiece itself: user-defined pieces are text
    (converted / "tokenizer.json").write_text(json.dumps(spec))
    return AutoTokenizer.from_pretrained(str(converted)), pieces


def test_user_defined_sentencepiece_pieces_are_text_though_listed_as_special(user_defined_piece_tokenizer):
    tokenizer, pieces = user_defined_piece_tokenizer
    ids = tokenizer.convert_tokens_to_ids(pieces)
    assert set(ids) <= set(tokenizer.all_special_ids)  # the Mistral situation
    vocab = TokenVocab.from_tokenizer(tokenizer)
    assert [vocab.token_bytes[i] for i in ids] == [p.encode() for p in pieces]
    assert not set(ids) & vocab.special_ids
    for control in (tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.unk_token_id):
        assert control in vocab.special_ids and vocab.token_bytes[control] == b""
    text_ids = (tokenizer.encode(" we ass", add_special_tokens=False) + [ids[2]]
                + tokenizer.encode("ume", add_special_tokens=False) + [tokenizer.eos_token_id])
    joined = b"".join(vocab.token_bytes[i] for i in text_ids).decode()
    assert vocab.prefix_space  # legacy add_dummy_prefix: the tokenizer's decode drops the first space
    assert joined == " " + tokenizer.decode(text_ids, skip_special_tokens=True)


def test_a_term_beside_a_user_defined_piece_is_matched_as_the_text_shows_it(user_defined_piece_tokenizer):
    from helpers.tokens import terms_by_tokens

    from guardrail.matching.compiler import compile_artefact
    from guardrail.wordlists.wordlist import wordlist_from_terms

    tokenizer, pieces = user_defined_piece_tokenizer
    vocab = TokenVocab.from_tokenizer(tokenizer)
    artefact = compile_artefact(vocab, [wordlist_from_terms(["ass", "fuck"])])
    ref = tokenizer.convert_tokens_to_ids(pieces[2])

    def glued(text: str) -> list[int]:  # text right after the piece, no space: byte-fallback pieces
        return tokenizer.convert_tokens_to_ids([f"<0x{b:02X}>" for b in text.encode()])

    shown = tokenizer.encode(" we ass", add_special_tokens=False) + [ref] + glued("ume")
    assert tokenizer.decode(shown, skip_special_tokens=True) == "we ass[REFERENCE_DOC_19]ume"
    assert terms_by_tokens(artefact, shown) == {"ass"}
    split = tokenizer.encode(" fu", add_special_tokens=False) + [ref] + glued("ck")
    assert tokenizer.decode(split, skip_special_tokens=True) == "fu[REFERENCE_DOC_19]ck"
    assert terms_by_tokens(artefact, split) == set()  # no term in the text the reader sees
