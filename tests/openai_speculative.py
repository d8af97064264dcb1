#!/usr/bin/env python3
"""`--speculative-config` through `pagoda serve`, read by the official `openai` package.

Usage: tests/openai_speculative.py PAGODA_BINARY [MODEL]. Serves the default model without
speculation, then with n-gram speculation (vLLM's JSON object); a greedy completion that
copies its prompt, a chat completion and their streamed twins give the same text and token
counts from both servers, and the speculative server's /metrics shows accepted proposals
under vLLM's names. A config with an unknown field stops `serve` before it loads anything,
naming the field.
"""

import subprocess
import sys
import urllib.request

from openai_client import pagoda_server

SPEC = '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}'
PASSAGE = (
    "The river rises in the hills, runs past the mill and the old stone bridge, "
    "and reaches the sea at the harbour town."
)
PROMPT = f"Repeat the text exactly.\nText: {PASSAGE}\nRepeat: {PASSAGE}\nRepeat: The river rises"


def replies(client) -> list:
    """Greedy replies: a completion that copies its prompt and a chat reply, each whole and
    streamed, as (text, completion tokens, finish reason)."""
    out = []
    completion = client.completions.create(model="smollm2", prompt=PROMPT, temperature=0, max_tokens=32)
    choice = completion.choices[0]
    out.append((choice.text, completion.usage.completion_tokens, choice.finish_reason))
    streamed = client.completions.create(
        model="smollm2", prompt=PROMPT, temperature=0, max_tokens=32, stream=True
    )
    out.append(("".join(chunk.choices[0].text for chunk in streamed if chunk.choices), None, None))
    messages = [{"role": "user", "content": f"Copy this sentence: {PASSAGE}"}]
    chat = client.chat.completions.create(model="smollm2", messages=messages, temperature=0, max_tokens=24)
    out.append((chat.choices[0].message.content, chat.usage.completion_tokens, chat.choices[0].finish_reason))
    return out


def metric(base: str, name: str) -> float:
    with urllib.request.urlopen(f"{base}/metrics", timeout=10) as response:
        for line in response.read().decode().splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not on /metrics")


def main() -> None:
    refused = subprocess.run(
        [sys.argv[1], "serve", "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 2, "k": 1}'],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode != 0 and "unknown field `k`" in refused.stderr, refused.stderr

    with pagoda_server(sys.argv) as client:
        plain = replies(client)
    with pagoda_server(sys.argv, flags=("--speculative-config", SPEC)) as client:
        speculative = replies(client)
        base = str(client.base_url).removesuffix("/").removesuffix("/v1")
        drafts = metric(base, "pagoda:spec_decode_num_draft_tokens_total")
        accepted = metric(base, "pagoda:spec_decode_num_accepted_tokens_total")
    assert plain[0][0] == plain[1][0], "streamed and whole completions differ"
    assert speculative == plain, f"{speculative} != {plain}"
    assert 0 < accepted <= drafts, (accepted, drafts)
    print(f"openai_speculative: same replies, {accepted:.0f} of {drafts:.0f} proposed tokens accepted")


if __name__ == "__main__":
    main()
