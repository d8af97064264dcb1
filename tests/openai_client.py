#!/usr/bin/env python3
"""The official `openai` package against `pagoda serve`: a chat completion, streamed and not,
and a prompt scored with `echo` (what lm-evaluation-harness's `local-completions` sends).

Usage: tests/openai_client.py PAGODA_BINARY [MODEL]. Starts the server on a free loopback
port (default model unless MODEL is given), waits for /health, then checks that a greedy
chat completion and its streamed twin give the same text, with usage and a finish reason.
"""

import contextlib
import sys

import openai

from pagoda_serve import serving


@contextlib.contextmanager
def pagoda_server(argv: list[str], timeout_s: float = 600.0, flags: tuple[str, ...] = ()):
    """`pagoda serve` as `smollm2` on a free loopback port (argv: PAGODA_BINARY [MODEL]) with
    `flags`, healthy; yields an `openai` client for it and stops the server after."""
    with serving(argv, flags) as base:
        yield openai.OpenAI(base_url=f"{base}/v1", api_key="unused", timeout=timeout_s)


def main() -> None:
    with pagoda_server(sys.argv) as client:
        assert [m.id for m in client.models.list().data] == ["smollm2"]
        messages = [{"role": "user", "content": "What is the capital of France?"}]

        reply = client.chat.completions.create(model="smollm2", messages=messages, temperature=0, max_tokens=12)
        text = reply.choices[0].message.content
        assert reply.choices[0].message.role == "assistant"
        assert text, "empty reply"
        assert reply.choices[0].finish_reason in ("stop", "length")
        assert reply.usage.completion_tokens > 0 and reply.usage.prompt_tokens > 0
        assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens

        stream = client.chat.completions.create(
            model="smollm2",
            messages=messages,
            temperature=0,
            max_tokens=12,
            stream=True,
            stream_options={"include_usage": True},
        )
        pieces, finish, usage = [], None, None
        for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
            for choice in chunk.choices:
                pieces.append(choice.delta.content or "")
                finish = choice.finish_reason or finish
        assert "".join(pieces) == text, f"streamed {''.join(pieces)!r} != {text!r}"
        assert finish == reply.choices[0].finish_reason
        assert usage is not None and usage.completion_tokens == reply.usage.completion_tokens

        # SmolLM2's token 28 is ",": a bias of 100 makes it the only choice.
        forced = client.chat.completions.create(
            model="smollm2", messages=messages, temperature=0, max_tokens=4, logit_bias={"28": 100}
        )
        assert forced.choices[0].message.content == ",,,,", forced.choices[0].message.content

        try:
            client.chat.completions.create(model="smollm2", messages=messages, temperature=-1)
            raise AssertionError("temperature -1 was accepted")
        except openai.BadRequestError as error:
            assert "temperature" in str(error)
        # Scoring a prompt: echo, logprobs and max_tokens 0 give the prompt back with each
        # token's logprob after the first (null), and generate nothing; vLLM's prompt_logprobs
        # (an extra field) agree with them.
        prompt = "The capital of France is Paris"
        scored = client.completions.create(
            model="smollm2", prompt=prompt, echo=True, logprobs=1, max_tokens=0, temperature=0,
            extra_body={"prompt_logprobs": 1},
        )
        choice = scored.choices[0]
        assert choice.text == prompt, choice.text
        assert scored.usage.completion_tokens == 0
        token_logprobs = choice.logprobs.token_logprobs
        assert len(token_logprobs) == scored.usage.prompt_tokens
        assert token_logprobs[0] is None and all(lp is not None and lp <= 0 for lp in token_logprobs[1:])
        vllm = choice.model_extra["prompt_logprobs"]
        assert vllm[0] is None and len(vllm) == len(token_logprobs)
        for position, logprob in zip(vllm[1:], token_logprobs[1:]):
            assert logprob in [entry["logprob"] for entry in position.values()], (position, logprob)
        print(f"openai client test passed: {text!r}; {prompt!r} scores {sum(token_logprobs[1:]):.3f}")


if __name__ == "__main__":
    main()
