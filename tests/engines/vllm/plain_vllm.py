"""Plain vLLM for the tests: read requests as JSON on stdin, generate with ``vllm.LLM``, print one JSON line.

Runs in its own process so that it shares nothing with the driver's engine (see ``conftest.run_plain_vllm``).
"""

import json
import sys

from vllm import LLM, SamplingParams
from vllm.inputs import TokensPrompt

from guardrail.models import model_directory


def main() -> None:
    requests = json.load(sys.stdin)
    llm = LLM(model=str(model_directory("smollm2")), dtype="float32", max_model_len=2048, block_size=32,
              enable_prefix_caching=True, enforce_eager=True)
    prompts = [TokensPrompt(prompt_token_ids=r["prompt_ids"]) for r in requests]
    params = [SamplingParams(**r["sampling"]) for r in requests]
    outputs = llm.generate(prompts, params, use_tqdm=False)
    print(json.dumps([{"token_ids": list(o.outputs[0].token_ids), "text": o.outputs[0].text} for o in outputs]))


if __name__ == "__main__":
    main()
