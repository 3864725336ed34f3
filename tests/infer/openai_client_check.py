"""Checks a running `tessera serve` with the official `openai` Python client.

Usage: openai_client_check.py BASE_URL MODEL MAX_PROMPT CONTEXT
  BASE_URL    e.g. http://127.0.0.1:8000 (without /v1)
  MODEL       the served model name
  MAX_PROMPT  the server's prompt limit in tokens (max_prefill_predict_length)
  CONTEXT     the server's context in tokens (max_target_length)

Run by tests/infer/server_e2e_test.cc. Covers completions and chat completions, whole and
streamed; four concurrent streams (each well formed, and the server batched them); seeds; usage
counts; and the client errors the server must raise (each through the client's own exception).
Prints one line per check and "N passed, M failed"; exits 1 when a check fails.
"""

import sys
import threading
import time
import traceback
import urllib.request
import json

import openai


def main():
    base_url, model = sys.argv[1], sys.argv[2]
    max_prompt, context = int(sys.argv[3]), int(sys.argv[4])
    client = openai.OpenAI(base_url=base_url + "/v1", api_key="not-used", max_retries=0, timeout=60)
    checks = []

    def check(fn):
        checks.append(fn)
        return fn

    def health():
        with urllib.request.urlopen(base_url + "/health", timeout=10) as r:
            return json.loads(r.read())

    def stream_text(stream, chat):
        """Concatenated text, the finish reasons seen, usage (if sent), chunk count."""
        text, reasons, usage, n = "", [], None, 0
        for chunk in stream:
            n += 1
            if chunk.usage is not None:
                usage = chunk.usage
                assert chunk.choices == [], "the usage chunk has no choices"
                continue
            assert len(chunk.choices) == 1, chunk
            c = chunk.choices[0]
            assert not reasons, "a chunk after the one with finish_reason"
            if chat:
                text += c.delta.content or ""
            else:
                text += c.text
            if c.finish_reason is not None:
                reasons.append(c.finish_reason)
        return text, reasons, usage, n

    @check
    def completion():
        r = client.completions.create(model=model, prompt="hello world", max_tokens=8, temperature=0)
        assert r.object == "text_completion"
        assert r.model == model
        assert len(r.choices) == 1
        c = r.choices[0]
        assert isinstance(c.text, str)
        assert c.finish_reason in ("stop", "length"), c.finish_reason
        u = r.usage
        assert u.prompt_tokens > 0 and 1 <= u.completion_tokens <= 8, u
        assert u.total_tokens == u.prompt_tokens + u.completion_tokens
        if c.finish_reason == "length":
            assert u.completion_tokens == 8, u
        # The same greedy request streamed gives the same text.
        text, reasons, _, n = stream_text(
            client.completions.create(model=model, prompt="hello world", max_tokens=8, temperature=0, stream=True),
            chat=False)
        assert text == c.text, (text, c.text)
        assert reasons == [c.finish_reason], reasons
        assert n >= 2

    @check
    def chat_completion():
        messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hi."}]
        r = client.chat.completions.create(model=model, messages=messages, max_tokens=6, temperature=0)
        assert r.object == "chat.completion"
        m = r.choices[0].message
        assert m.role == "assistant" and isinstance(m.content, str)
        assert r.choices[0].finish_reason in ("stop", "length")
        assert 1 <= r.usage.completion_tokens <= 6
        stream = client.chat.completions.create(model=model, messages=messages, max_tokens=6, temperature=0,
                                                stream=True, stream_options={"include_usage": True})
        text, reasons, usage, _ = stream_text(stream, chat=True)
        assert text == m.content, (text, m.content)
        assert reasons == [r.choices[0].finish_reason]
        assert usage is not None and usage.completion_tokens == r.usage.completion_tokens, usage

    @check
    def seeded_sampling_repeats():
        kw = dict(model=model, prompt="once upon", max_tokens=12, temperature=1.0, top_p=0.9, seed=1234)
        a = client.completions.create(**kw).choices[0].text
        b = client.completions.create(**kw).choices[0].text
        assert a == b, (a, b)

    @check
    def four_concurrent_streams():
        # A decode step of the test model takes tens of microseconds, so short requests sent "at
        # once" may still be served one after another. The first stream is therefore long (most
        # of the context) and the other three start once its first chunk has arrived: they join
        # its batch while it runs, which is what the server must show in max_decode_batch.
        long_tokens = min(context - max_prompt, 1000)
        first = client.completions.create(model=model, prompt="the cat", max_tokens=long_tokens, temperature=0,
                                          stream=True, stream_options={"include_usage": True})
        chunks = iter(first)
        head = next(chunks)
        prompts = ["a dog ran", "hello", "one two three"]
        results = [None] * len(prompts)
        start = threading.Barrier(len(prompts))

        def run(i):
            try:
                start.wait()
                stream = client.completions.create(model=model, prompt=prompts[i], max_tokens=24, temperature=0,
                                                   stream=True, stream_options={"include_usage": True})
                results[i] = stream_text(stream, chat=False)
            except Exception as e:  # reported below
                results[i] = e

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
        for t in threads:
            t.start()
        text, reasons, usage, _ = stream_text(chunks, chat=False)
        for t in threads:
            t.join(60)
        results.append((head.choices[0].text + text, reasons, usage, 0))
        for i, (limit, r) in enumerate(zip([24, 24, 24, long_tokens], results)):
            assert not isinstance(r, Exception) and r is not None, f"stream {i}: {r!r}"
            text, reasons, usage, _ = r
            assert len(reasons) == 1 and reasons[0] in ("stop", "length"), reasons
            assert usage is not None and 1 <= usage.completion_tokens <= limit, usage
            if reasons[0] == "length":
                assert usage.completion_tokens == limit, usage
        # A client holds its last chunk a moment before the scheduler thread has released the
        # request's slot: wait (briefly) for the counters to settle rather than racing them.
        deadline = time.monotonic() + 10
        h = health()
        while (h["active"] or h["queued"]) and time.monotonic() < deadline:
            time.sleep(0.01)
            h = health()
        assert h["max_decode_batch"] >= 2, f"the streams were never decoded together: {h}"
        assert h["active"] == 0 and h["queued"] == 0, h

    def expect_error(cls, status, fn, param=None, says=()):
        try:
            fn()
        except cls as e:
            assert e.status_code == status, (e.status_code, e.message)
            if param is not None:
                assert e.param == param, (e.param, e.message)
            for s in says:
                assert s in e.message, (s, e.message)
            return
        raise AssertionError(f"no {cls.__name__}")

    @check
    def prompt_over_the_limit():
        expect_error(openai.BadRequestError, 400,
                     lambda: client.completions.create(model=model, prompt="word " * (4 * max_prompt), max_tokens=1),
                     param="prompt", says=[str(max_prompt)])

    @check
    def max_tokens_over_the_context():
        expect_error(openai.BadRequestError, 400,
                     lambda: client.completions.create(model=model, prompt="hello", max_tokens=context),
                     param="max_tokens", says=[f"max_tokens {context}", f"context of {context}"])

    @check
    def wrong_types_and_refused_features():
        c = client.completions
        expect_error(openai.BadRequestError, 400, lambda: c.create(model=model, prompt="x", temperature="hot"),
                     param="temperature")
        expect_error(openai.BadRequestError, 400, lambda: c.create(model=model, prompt="x", n=2), param="n")
        expect_error(openai.BadRequestError, 400, lambda: c.create(model=model, prompt="x", logprobs=2),
                     param="logprobs")
        expect_error(openai.BadRequestError, 400, lambda: c.create(model=model, prompt=["a", "b"]), param="prompt")
        expect_error(openai.BadRequestError, 400,
                     lambda: c.create(model=model, prompt="x", extra_body={"frobnicate": 1}), param="frobnicate")
        expect_error(openai.BadRequestError, 400,
                     lambda: client.chat.completions.create(model=model, messages=[{"role": "user"}]))

    @check
    def unknown_model():
        expect_error(openai.NotFoundError, 404, lambda: client.completions.create(model="gpt-9", prompt="x"),
                     param="model")

    @check
    def models_and_health():
        assert [m.id for m in client.models.list()] == [model]
        assert health()["status"] == "ok"

    failed = 0
    for fn in checks:
        try:
            fn()
            print(f"ok      {fn.__name__}")
        except Exception:
            failed += 1
            print(f"FAILED  {fn.__name__}")
            traceback.print_exc(file=sys.stdout)
    print(f"{len(checks) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
