"""The logits-processor plugin alone (mask-only), as plain vLLM users get it: loaded by entry point, guarded
per request through ``SamplingParams.extra_args``."""

from importlib.metadata import entry_points

import pytest

# Not plain "vllm": without vLLM installed, this very directory would import as a namespace package.
pytest.importorskip("vllm.v1.sample.logits_processor")

from helpers.paths import load_data
from vllm import SamplingParams  # noqa: E402

from guardrail.engines.vllm.logits_processor import GuardArgs, GuardLogitsProcessor, parse_guard_args  # noqa: E402
from guardrail.matching.textmatch import TextMatcher  # noqa: E402
from guardrail.wordlists.wordlist import wordlist_from_terms  # noqa: E402

LEAKS = load_data("leak_prompts.json")
#: Leak-suite terms that SmolLM2 says in one token (" sorry", " blue"...): the mask alone must stop them.
SINGLE_TOKEN = ("sorry", "blue", "cold", "teacher", "mice", "January", "oxygen", "Paris", "listen", "please")
CASES = [case for case in LEAKS if case["term"] in SINGLE_TOKEN]


def test_the_entry_point_names_the_processor():
    found = {ep.name: ep for ep in entry_points(group="vllm.logits_processors")}
    assert found["guardrail"].load() is GuardLogitsProcessor


@pytest.mark.parametrize(("guard", "field"), [
    (["en"], "extra_args['guardrail'] must be an object"),
    ("en", "is a string but not JSON"),
    ('"en"', "extra_args['guardrail'] must be an object"),
    ('{"wordlist": ["en"]}', "unknown field"),
    ({"wordlist": ["en"]}, "unknown field"),
    ({"wordlists": "en"}, "'wordlists'"),
    ({"wordlists": ["no-such-list"]}, "no-such-list"),
    ({"banned_terms": [""]}, "'banned_terms'"),
    ({"banned_terms": ["***"]}, "letter or digit"),
    ({"bans": {"-1": [3]}}, "'bans'"),
    ({"bans": {"0": [3, -4]}}, "'bans'"),
    ({"bans": [[0, 3]]}, "'bans'"),
    ({"always_banned": [1, "2"]}, "'always_banned'"),
    ({"banned_ids": [1, "2"]}, "'always_banned'"),  # the former name, read as the new one
    ({"banned_ids": [1], "always_banned": [2]}, "former name"),
    ({"resume_tokens": -2}, "'resume_tokens'"),
    ({"resume_tokens": True}, "'resume_tokens'"),
    ({"mask": "everything"}, "'mask'"),
])
def test_validate_params_rejects_bad_extra_args_naming_the_field(guard, field):
    with pytest.raises(ValueError, match=field.replace("[", r"\[").replace("(", r"\(")):
        GuardLogitsProcessor.validate_params(SamplingParams(extra_args={"guardrail": guard}))


def test_requests_without_the_key_are_not_guarded():
    assert parse_guard_args(None) is None
    assert parse_guard_args({"other": 1}) is None
    GuardLogitsProcessor.validate_params(SamplingParams())


def test_guard_args_round_trip_through_extra_args():
    args = GuardArgs(("en",), ("sorry",), {0: (5, 7), 3: (9,)}, resume_tokens=4, mask="bans", always_banned=(1, 2))
    assert parse_guard_args(args.to_extra_args()) == args
    # vllm_xargs (vLLM's HTTP server) carries no nested objects: the entry travels JSON-encoded.
    xargs = args.to_vllm_xargs()
    assert isinstance(xargs["guardrail"], str) and parse_guard_args(xargs) == args


def test_the_former_name_of_always_banned_is_still_read():
    assert parse_guard_args({"guardrail": {"banned_ids": [3, 4]}}).always_banned == (3, 4)


@pytest.mark.slow
def test_the_processor_masks_each_request_as_its_session_would_through_joins_moves_and_leaves(driver, tok):
    """The processor through vLLM's interface (``BatchUpdate``: removes, adds, moves; ``apply``) on the
    running engine's config: each guarded row gets what a :class:`MaskSession` fed its ids masks, plus its
    own ids and position bans; an unguarded row gets nothing."""
    import torch
    from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality

    from guardrail.guard.session import MaskSession
    from guardrail.matching.compiler import compile_artefact
    from guardrail.matching.obfuscation import DEFAULT_OBFUSCATION
    from guardrail.matching.vocab import TokenVocab
    from guardrail.wordlists.wordlist import with_obfuscation

    config = driver.engine.vllm_config
    processor = GuardLogitsProcessor(config, torch.device("cpu"), is_pin_memory=False)
    width = config.model_config.get_vocab_size()
    outputs = [[], [], []]
    guarded = SamplingParams(extra_args={"guardrail": {"banned_terms": ["hello"], "always_banned": [7]}})
    bans = SamplingParams(extra_args={"guardrail": {"mask": "bans", "bans": {"1": [5, 6]}}})
    processor.update_state(BatchUpdate(3, [], [(0, guarded, [1], outputs[0]), (1, SamplingParams(), [1], outputs[1]),
                                              (2, bans, [1], outputs[2])], []))
    vocab = processor._load_vocab()
    assert isinstance(vocab, TokenVocab)
    # The request names no level: the processor compiles at the default, as every path does.
    session = MaskSession(compile_artefact(vocab, with_obfuscation([wordlist_from_terms(["hello"])],
                                                                   DEFAULT_OBFUSCATION)), vocab,
                          eos_ids=processor._eos_ids, num_logits=width)

    def masked(logits, row):
        return set(torch.nonzero(logits[row] == -float("inf")).flatten().tolist())

    for step, token in enumerate([tok(" hello"), tok(" there"), tok(" hello")]):
        for out in outputs:
            out.append(token)
        session.advance(token)
        logits = processor.apply(torch.zeros((3, width)))
        assert masked(logits, 0) == set(session.mask_ids().tolist()) | {7}
        assert masked(logits, 1) == set()
        assert masked(logits, 2) == ({5, 6} if step == 0 else set())  # position 1 is after the first id
    # Row 0 leaves, a new guarded request takes its index and swaps with row 2: each mask follows its request.
    joined = [tok(" hello")]
    processor.update_state(BatchUpdate(3, [0], [(0, guarded, [1], joined)], [(0, 2, MoveDirectionality.SWAP)]))
    fresh = MaskSession(session.artefact, vocab, eos_ids=processor._eos_ids, num_logits=width)
    fresh.advance(joined[0])
    logits = processor.apply(torch.zeros((3, width)))
    assert masked(logits, 2) == set(fresh.mask_ids().tolist()) | {7} and len(fresh.mask_ids()) > 1
    assert masked(logits, 0) == set() and masked(logits, 1) == set()  # the bans request is past position 1


@pytest.mark.slow
def test_the_plugin_alone_never_lets_a_banned_single_token_term_through(chat_ids, run_plain_vllm):
    terms = sorted({case["term"] for case in CASES})
    guard = {"guardrail": {"banned_terms": terms}}
    requests = []
    for case in CASES:
        ids = chat_ids(case["prompt"])
        requests.append({"prompt_ids": ids, "sampling": {"temperature": 0, "max_tokens": case["tokens_to_term"]}})
        for seed in (None, 0, 1):
            sampling = {"temperature": 0 if seed is None else 1.0, "seed": seed,
                        "max_tokens": case["tokens_to_term"] + 6, "extra_args": guard}
            requests.append({"prompt_ids": ids, "sampling": sampling})
    outputs = run_plain_vllm(requests)
    matcher = TextMatcher([wordlist_from_terms(terms)])
    for index, case in enumerate(CASES):
        unguarded, *guarded = outputs[4 * index:4 * index + 4]
        # The suite stays meaningful: unguarded, vLLM says the term.
        assert TextMatcher([wordlist_from_terms([case["term"]])]).scan(unguarded["text"]), unguarded["text"]
        for output in guarded:
            # What the mask guarantees: no emitted token completes a term. A word term may still be the
            # very last text when max_tokens cuts it (its boundary pends; docs/vllm.md), so the text is
            # checked as if a word character followed.
            assert matcher.scan(output["text"] + "x") == [], output["text"]
