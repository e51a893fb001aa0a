"""Tool-call benchmark: how many forced tool calls parse and follow their tool's schema, with the bundled SmolLM2
(135M) under the guard, generated under the tool-call grammar (service/tool_grammar.py) against the same calls
made as the service made them before it (the call's opening in the prompt, nothing holding the arguments:
``baseline``), measured in the same run; and the leak suite through forced tool calls.

Prints one JSON object. Rows, for ``named`` (``tool_choice`` naming the prompt's tool) and ``required`` (all
tools offered, some call required), greedy and at temperature 1 (seed = prompt index):

- ``calls``: generations; ``valid``: answers that hold at least one call, every call to a declared tool, whose
  arguments parse as a JSON object that validates against that tool's ``parameters`` (jsonschema, Draft
  2020-12), and, for ``named``, to the named tool; ``valid_ratio``; ``finish_reasons``;
  ``tokens_per_call`` (completion tokens); ``seconds``.

Floor: ``valid_ratio`` 1.0 in every grammar row (issue 30). Prompts: :data:`TOOLS` (10 tools) x 5 requests each
= 50 varied prompts, through the bundled Hermes chat template, the ``en`` list in force.

``leak_suite_forced``: each prompt of tests/data/leak_prompts.json (the leak suite) answered through a forced call
of ``reply(text: string)``, every target term banned: a leak is a target in the call's arguments or in any
streamed prefix (the text contract, ``TextMatcher``); must be 0. ``calls_valid`` counts the calls that still
parse and validate.

Usage: python bench/tool_calls.py [--prompts 50] [--max-tokens 96]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

# This checkout first: its guardrail and its service package (bench/service.py would shadow the latter).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import jsonschema  # noqa: E402

from guardrail.engines.transformers.decoder import StreamingDecoder  # noqa: E402
from guardrail.guard.events import Finish, TextDelta  # noqa: E402
from guardrail.matching.compiler import compile_artefact  # noqa: E402
from guardrail.matching.obfuscation import OFF  # the artefacts here compile the lists as they are
from guardrail.matching.textmatch import TextMatcher  # noqa: E402
from guardrail.matching.vocab import TokenVocab  # noqa: E402
from guardrail.models import load_model, load_tokenizer  # noqa: E402
from guardrail.params import SamplingParams  # noqa: E402
from guardrail.prompts import load_chat_template, prompt_ids  # noqa: E402
from guardrail.wordlists.wordlist import bundled_wordlist, wordlist_from_terms  # noqa: E402
from service.tool_calls import HermesParser, parse_answer  # noqa: E402
from service.tool_grammar import ToolSpec, tool_grammar  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
#: A generation's wall-clock limit: generous, so that a loaded machine slows the run instead of cutting answers.
TIMEOUT_S = 600.0


def _object(properties: dict, required: list[str] | None = None) -> dict:
    return {"type": "object", "properties": properties, "required": required or list(properties),
            "additionalProperties": False}


STRING, INTEGER, NUMBER, BOOLEAN = {"type": "string"}, {"type": "integer"}, {"type": "number"}, {"type": "boolean"}
#: (name, description, parameters, five requests that call for it).
TOOLS = [
    ("get_weather", "Get the current weather in a city.",
     _object({"city": STRING, "unit": {"enum": ["celsius", "fahrenheit"]}}, ["city"]),
     ["What is the weather like in Paris?", "Is it raining in London right now?", "How warm is it in Tokyo today?",
      "Tell me the temperature in Berlin in fahrenheit.", "Do I need an umbrella in Seattle?"]),
    ("convert_currency", "Convert an amount of money between currencies.",
     _object({"amount": NUMBER, "from_currency": STRING, "to_currency": STRING}),
     ["How much is 100 dollars in euros?", "Convert 50 GBP to USD.", "What are 2500 yen in dollars?",
      "I have 20 euros, how many Swiss francs is that?", "Change 75.5 CAD into AUD."]),
    ("search_web", "Search the web for pages about a query.",
     _object({"query": STRING, "max_results": {"type": "integer", "minimum": 1, "maximum": 10}}, ["query"]),
     ["Find recent news about electric cars.", "Search for the history of the Eiffel Tower.",
      "Look up recipes for banana bread.", "Who won the last football world cup? Search it.",
      "Find tutorials about learning Python."]),
    ("create_event", "Add an event to the user's calendar.",
     _object({"title": STRING, "date": STRING, "duration_minutes": INTEGER}, ["title", "date"]),
     ["Schedule a meeting with Anna on Monday.", "Put the dentist appointment on 2025-03-14 in my calendar.",
      "Add a one hour gym session tomorrow.", "Create an event called Team lunch on Friday.",
      "Remind me of mum's birthday on June 2nd."]),
    ("send_email", "Send an email.",
     _object({"to": STRING, "subject": STRING, "body": STRING}),
     ["Email bob@example.com that I will be late.", "Send my boss a note saying the report is done.",
      "Write to alice@example.org to thank her for the gift.", "Tell the team by email that the office is closed.",
      "Send an email to support asking for a refund."]),
    ("calculate", "Evaluate an arithmetic expression.",
     _object({"expression": STRING}),
     ["What is 17 times 23?", "Compute 2 to the power of 10.", "How much is 144 divided by 12?",
      "Add 3.5 and 4.25.", "What is the square root of 81?"]),
    ("set_timer", "Start a countdown timer.",
     _object({"minutes": {"type": "integer", "minimum": 0}, "label": STRING}, ["minutes"]),
     ["Set a timer for 10 minutes.", "Start a 3 minute timer for the eggs.", "Time 25 minutes of work for me.",
      "I need a timer of one hour.", "Remind me in 5 minutes to check the oven."]),
    ("translate", "Translate text into another language.",
     _object({"text": STRING, "target_language": STRING}),
     ["Translate good morning into Spanish.", "How do you say thank you in Japanese?",
      "Translate 'where is the station' into German.", "Say I love books in French.",
      "What is 'cheese' in Italian?"]),
    ("get_stock_price", "Get the latest price of a stock.",
     _object({"ticker": STRING}),
     ["What is Apple's stock price?", "How is MSFT trading today?", "Check the price of Tesla shares.",
      "Give me the latest quote for AMZN.", "What does one Nvidia share cost?"]),
    ("toggle_light", "Turn a light in the house on or off.",
     _object({"room": STRING, "on": BOOLEAN}),
     ["Turn on the kitchen light.", "Switch off the lights in the bedroom.", "Lights on in the living room please.",
      "Turn the bathroom light off.", "Can you switch on the garage light?"]),
]
REPLY = ("reply", "Reply to the user.", _object({"text": STRING}))


def function(name: str, description: str, parameters: dict) -> dict:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}


def valid_calls(text: str, schemas: dict[str, dict], named: str | None) -> bool:
    """Whether ``text`` holds at least one call, each to a declared tool (the named one) with arguments that
    validate against its schema."""
    _, calls = parse_answer(HermesParser(), text)
    if not calls:
        return False
    for call in calls:
        if call.name not in schemas or (named is not None and call.name != named):
            return False
        try:
            arguments = json.loads(call.arguments)
            jsonschema.validate(arguments, schemas[call.name])
        except (ValueError, jsonschema.ValidationError):
            return False
    return True


def generate(decoder, ids, artefact, params) -> tuple[Finish, list[str]]:
    """The finish and every released prefix of the answer."""
    released, prefixes = "", []
    finish = None
    for event in decoder.stream(ids, artefact, params):
        if isinstance(event, TextDelta) and event.text:
            released += event.text
            prefixes.append(released)
        elif isinstance(event, Finish):
            finish = event
    assert finish is not None
    return finish, prefixes


def bench_calls(decoder, tokenizer, artefact, cases, mode: str, grammar: bool, temperature: float,
                max_tokens: int) -> dict:
    template = load_chat_template("hermes")
    valid = tokens = 0
    reasons: dict[str, int] = {}
    started = time.perf_counter()
    for index, (tool, request) in enumerate(cases):
        name, description, parameters = tool
        offered = [tool] if mode == "named" else TOOLS
        functions = [function(*t[:3]) for t in offered]
        schemas = {t[0]: t[2] for t in offered}
        named = name if mode == "named" else None
        # Baseline: the opening of the call in the prompt (through the name for a named choice), no grammar.
        opening = "" if grammar else '<tool_call>\n{"name": "' + (name + '", "arguments": ' if named else "")
        ids = prompt_ids(tokenizer, messages=[{"role": "user", "content": request}], tools=functions,
                         chat_template=template, assistant_prefix=opening)
        spec = tool_grammar("hermes", [ToolSpec(t[0], t[2]) for t in offered], "named" if named else "required",
                            named, parallel=False) if grammar else None
        params = SamplingParams(temperature=temperature, seed=index if temperature else None, max_tokens=max_tokens,
                                timeout_s=TIMEOUT_S,
                                response_format=spec, stop=() if grammar else ("</tool_call>",))
        finish, _ = generate(decoder, ids, artefact, params)
        valid += valid_calls(opening + finish.text, schemas, named)
        tokens += finish.usage.completion_tokens
        reasons[finish.reason] = reasons.get(finish.reason, 0) + 1
    return {"calls": len(cases), "valid": valid, "valid_ratio": round(valid / len(cases), 4),
            "finish_reasons": reasons, "tokens_per_call": round(tokens / len(cases), 1),
            "seconds": round(time.perf_counter() - started, 1)}


def bench_leaks(decoder, tokenizer, max_tokens: int) -> dict:
    cases = json.loads((ROOT / "tests" / "data" / "leak_prompts.json").read_text(encoding="utf-8"))
    lists = [wordlist_from_terms(sorted({c["term"] for c in cases}), name="targets")]
    artefact = compile_artefact(decoder.vocab, lists)
    matcher = TextMatcher(lists, obfuscation=OFF)
    template = load_chat_template("hermes")
    name, description, parameters = REPLY
    spec = tool_grammar("hermes", [ToolSpec(name, parameters)], "named", name)
    leaks = valid = rollbacks = 0
    reasons: dict[str, int] = {}
    for case in cases:
        ids = prompt_ids(tokenizer, messages=[{"role": "user", "content": case["prompt"]}],
                         tools=[function(name, description, parameters)], chat_template=template)
        finish, prefixes = generate(decoder, ids, artefact,
                                    SamplingParams(temperature=0, max_tokens=max_tokens, response_format=spec,
                                                   timeout_s=TIMEOUT_S))
        leaks += any(matcher.scan(prefix) for prefix in [*prefixes, finish.text])
        valid += valid_calls(finish.text, {name: parameters}, name)
        rollbacks += finish.usage.rollbacks
        reasons[finish.reason] = reasons.get(finish.reason, 0) + 1
    return {"prompts": len(cases), "leaks": leaks, "calls_valid": valid, "rollbacks": rollbacks,
            "finish_reasons": reasons}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=50, help="prompts per row (at most 50)")
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--no-baseline", action="store_true", help="skip the rows without the grammar")
    parser.add_argument("--rows", default="named_greedy,named_t1,required_greedy,required_t1,leaks",
                        help="the rows to run (comma-separated)")
    args = parser.parse_args()
    tokenizer = load_tokenizer("smollm2")
    vocab = TokenVocab.from_tokenizer(tokenizer)
    decoder = StreamingDecoder(load_model("smollm2"), tokenizer, vocab)
    artefact = compile_artefact(vocab, [bundled_wordlist("en")])
    cases = [(tool[:3], request) for tool in TOOLS for request in tool[3]][:args.prompts]
    rows: dict = {}
    wanted = set(args.rows.split(","))
    for mode in ("named", "required"):
        for label, temperature in (("greedy", 0.0), ("t1", 1.0)):
            if f"{mode}_{label}" not in wanted:
                continue
            rows[f"{mode}_{label}"] = bench_calls(decoder, tokenizer, artefact, cases, mode, True, temperature,
                                                  args.max_tokens)
            if not args.no_baseline:
                rows[f"{mode}_{label}_baseline"] = bench_calls(decoder, tokenizer, artefact, cases, mode, False,
                                                               temperature, args.max_tokens)
            print(json.dumps({k: v for k, v in rows.items() if k.startswith(f"{mode}_{label}")}), file=sys.stderr,
                  flush=True)  # progress: a long run's rows so far
    if "leaks" in wanted:
        rows["leak_suite_forced"] = bench_leaks(decoder, tokenizer, args.max_tokens)
    floor_met = all(row["valid_ratio"] == 1.0 for key, row in rows.items()
                    if key.startswith(("named", "required")) and not key.endswith("baseline"))
    print(json.dumps({"benchmark": "tool_calls", "model": "smollm2", "machine": platform.machine(),
                      "cpus": os.cpu_count(), "prompts": len(cases), "max_tokens": args.max_tokens,
                      "rows": rows, "floor_valid_ratio_1": floor_met,
                      "floor_leaks_0": rows["leak_suite_forced"]["leaks"] == 0 if "leak_suite_forced" in rows
                      else None}, indent=2))


if __name__ == "__main__":
    main()
