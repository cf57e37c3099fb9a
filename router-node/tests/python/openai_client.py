"""Drives a Switchyard node with the official `openai` Python client.

Usage: openai_client.py BASE_URL [MODEL]   (BASE_URL like http://127.0.0.1:8080/v1)

Runs, in order: a chat completion, a streamed chat completion, a completion, a streamed
completion, `models.list()`, and a request naming an unknown policy class (the node must
have a policy profile with classes, so that it answers 400). Prints one line per check,
`ok <check>: ...` or `FAIL <check>: <reason>`, and exits 1 when any check failed
(2 on bad usage or when `openai` cannot be imported).

Run by router-node/tests/integration/openai_python_client.rs; the client is installed by
scripts/install-pytools.sh.
"""

import sys
import traceback

try:
    import openai
    from openai import OpenAI
except ImportError as e:  # pragma: no cover - reported to the Rust test
    print(f"FAIL import: cannot import openai ({e}); run scripts/install-pytools.sh")
    sys.exit(2)

MAX_TOKENS = 4
TOKEN_TEXT = "tok "  # what the simulated worker generates per token


class CheckFailed(Exception):
    pass


def expect(cond, reason):
    if not cond:
        raise CheckFailed(reason)


def chat(client, model):
    r = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Say hello to the router."}],
        max_tokens=MAX_TOKENS,
    )
    expect(len(r.choices) == 1, f"{len(r.choices)} choices: {r}")
    msg = r.choices[0].message
    expect(msg.role == "assistant", f"role {msg.role!r}")
    expect(msg.content == TOKEN_TEXT * MAX_TOKENS, f"content {msg.content!r}")
    expect(r.choices[0].finish_reason == "length", f"finish_reason {r.choices[0].finish_reason!r}")
    expect(r.usage is not None and r.usage.completion_tokens == MAX_TOKENS, f"usage {r.usage}")
    return f"{msg.content!r}, usage {r.usage.prompt_tokens}+{r.usage.completion_tokens}"


def chat_stream(client, model):
    stream = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Stream hello to the router."}],
        max_tokens=MAX_TOKENS,
        stream=True,
    )
    deltas, finish, chunks = [], None, 0
    for chunk in stream:
        chunks += 1
        for choice in chunk.choices:
            if choice.delta is not None and choice.delta.content:
                deltas.append(choice.delta.content)
            if choice.finish_reason is not None:
                finish = choice.finish_reason
    text = "".join(deltas)
    expect(text.strip() != "", f"no text in {chunks} chunks")
    expect(text == TOKEN_TEXT * MAX_TOKENS, f"text {text!r}")
    expect(finish is not None, f"no chunk with a finish_reason in {chunks} chunks")
    return f"{len(deltas)} deltas {text!r} in {chunks} chunks, finish_reason {finish!r}"


def completion(client, model):
    r = client.completions.create(model=model, prompt="Once upon a time", max_tokens=MAX_TOKENS)
    expect(len(r.choices) == 1, f"{len(r.choices)} choices: {r}")
    expect(r.choices[0].text == TOKEN_TEXT * MAX_TOKENS, f"text {r.choices[0].text!r}")
    expect(r.choices[0].finish_reason == "length", f"finish_reason {r.choices[0].finish_reason!r}")
    expect(r.usage is not None and r.usage.completion_tokens == MAX_TOKENS, f"usage {r.usage}")
    return f"{r.choices[0].text!r}, usage {r.usage.prompt_tokens}+{r.usage.completion_tokens}"


def completion_stream(client, model):
    stream = client.completions.create(
        model=model, prompt="Once upon a stream", max_tokens=MAX_TOKENS, stream=True
    )
    pieces, finish, chunks = [], None, 0
    for chunk in stream:
        chunks += 1
        for choice in chunk.choices:
            if choice.text:
                pieces.append(choice.text)
            if choice.finish_reason is not None:
                finish = choice.finish_reason
    text = "".join(pieces)
    expect(text.strip() != "", f"no text in {chunks} chunks")
    expect(text == TOKEN_TEXT * MAX_TOKENS, f"text {text!r}")
    expect(finish is not None, f"no chunk with a finish_reason in {chunks} chunks")
    return f"{len(pieces)} pieces {text!r} in {chunks} chunks, finish_reason {finish!r}"


def models(client, model):
    ids = [m.id for m in client.models.list()]
    expect(model in ids, f"{model!r} not among {ids}")
    return f"{ids}"


def unknown_class(client, model):
    try:
        r = client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=1,
            extra_headers={"x-policy-class": "nope"},
        )
    except openai.BadRequestError as e:
        expect(e.status_code == 400, f"status {e.status_code}")
        expect("nope" in str(e.message), f"the error does not name the class: {e.message}")
        return f"BadRequestError {e.status_code}: {e.message}"
    except openai.APIStatusError as e:
        raise CheckFailed(f"{type(e).__name__} {e.status_code}, want BadRequestError 400: {e}")
    raise CheckFailed(f"no error, want BadRequestError 400: {r}")


CHECKS = [
    ("chat", chat),
    ("chat-stream", chat_stream),
    ("completion", completion),
    ("completion-stream", completion_stream),
    ("models", models),
    ("unknown-class", unknown_class),
]


def main(argv):
    if len(argv) not in (2, 3):
        print(f"usage: {argv[0]} BASE_URL [MODEL]", file=sys.stderr)
        return 2
    base_url = argv[1]
    model = argv[2] if len(argv) == 3 else "sim"
    print(f"openai {openai.__version__} against {base_url}, model {model!r}")
    client = OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=30.0)
    failed = []
    for name, check in CHECKS:
        try:
            detail = check(client, model)
            print(f"ok {name}: {detail}")
        except CheckFailed as e:
            failed.append(name)
            print(f"FAIL {name}: {e}")
        except openai.APIError as e:  # an HTTP error or a broken connection: no traceback
            failed.append(name)
            cause = f" ({type(e.__cause__).__name__}: {e.__cause__})" if e.__cause__ else ""
            print(f"FAIL {name}: {type(e).__name__}: {e}{cause}")
        except Exception as e:  # anything else (e.g. a response the client cannot read)
            failed.append(name)
            print(f"FAIL {name}: {type(e).__name__}: {e}")
            traceback.print_exc(file=sys.stdout)
        sys.stdout.flush()
    if failed:
        print(f"{len(failed)} of {len(CHECKS)} checks failed: {', '.join(failed)}")
        return 1
    print(f"all {len(CHECKS)} checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
