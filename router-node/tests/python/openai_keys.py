"""Drives a Switchyard node that requires API keys with the official `openai` Python client.

Usage: openai_keys.py BASE_URL MODEL GOOD_KEY WRONG_KEY SLOW_KEY

GOOD_KEY may use the class `interactive` (not `batch`); WRONG_KEY is in no keys file;
SLOW_KEY may send one request per 20 s. Runs, in order: a chat completion and the model
list with GOOD_KEY, the same with WRONG_KEY (AuthenticationError, 401), a request of
GOOD_KEY naming `batch` (PermissionDeniedError, 403, naming the class and the key), and two
requests of SLOW_KEY (the second: RateLimitError, 429, with a Retry-After). Prints one line per
check, `ok <check>: ...` or `FAIL <check>: <reason>`, and exits 1 when any check failed (2 on
bad usage or when `openai` cannot be imported).

Run by router-node/tests/integration/openai_python_client.rs; the client is installed by
scripts/install-pytools.sh.
"""

import sys

try:
    import openai
    from openai import OpenAI
except ImportError as e:  # pragma: no cover - reported to the Rust test
    print(f"FAIL import: cannot import openai ({e}); run scripts/install-pytools.sh")
    sys.exit(2)


class CheckFailed(Exception):
    pass


def expect(cond, reason):
    if not cond:
        raise CheckFailed(reason)


def hello(client, model, **extra):
    return client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "hello"}],
        max_tokens=2,
        **extra,
    )


def good_key(clients, model):
    r = hello(clients["good"], model)
    expect(r.choices[0].message.content, f"no content: {r}")
    return f"{r.choices[0].message.content!r}"


def good_key_models(clients, model):
    ids = [m.id for m in clients["good"].models.list()]
    expect(model in ids, f"{model!r} not among {ids}")
    return f"{ids}"


def refused(call, error, status, words):
    try:
        r = call()
    except error as e:
        expect(e.status_code == status, f"status {e.status_code}")
        for word in words:
            expect(word in str(e.message), f"{word!r} not in {e.message!r}")
        return e
    except openai.APIStatusError as e:
        raise CheckFailed(f"{type(e).__name__} {e.status_code}, want {error.__name__}: {e}")
    raise CheckFailed(f"no error, want {error.__name__}: {r}")


def wrong_key(clients, model):
    e = refused(lambda: hello(clients["wrong"], model), openai.AuthenticationError, 401, [])
    return f"AuthenticationError {e.status_code}: {e.message}"


def wrong_key_models(clients, model):
    e = refused(lambda: clients["wrong"].models.list(), openai.AuthenticationError, 401, [])
    return f"AuthenticationError {e.status_code}"


def class_not_entitled(clients, model):
    e = refused(
        lambda: hello(clients["good"], model, extra_headers={"x-policy-class": "batch"}),
        openai.PermissionDeniedError,
        403,
        ["batch", "team-a"],
    )
    return f"PermissionDeniedError {e.status_code}: {e.message}"


def rate_limited(clients, model):
    hello(clients["slow"], model)
    e = refused(lambda: hello(clients["slow"], model), openai.RateLimitError, 429, ["slow"])
    after = e.response.headers.get("retry-after")
    expect(after is not None and int(after) >= 1, f"Retry-After {after!r}")
    return f"RateLimitError {e.status_code}, Retry-After {after}: {e.message}"


CHECKS = [
    ("good-key", good_key),
    ("good-key-models", good_key_models),
    ("wrong-key", wrong_key),
    ("wrong-key-models", wrong_key_models),
    ("class-not-entitled", class_not_entitled),
    ("rate-limited", rate_limited),
]


def main(argv):
    if len(argv) != 6:
        print(f"usage: {argv[0]} BASE_URL MODEL GOOD_KEY WRONG_KEY SLOW_KEY", file=sys.stderr)
        return 2
    base_url, model, good, wrong, slow = argv[1:]
    print(f"openai {openai.__version__} against {base_url}, model {model!r}")
    clients = {
        name: OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=30.0)
        for name, key in [("good", good), ("wrong", wrong), ("slow", slow)]
    }
    failed = []
    for name, check in CHECKS:
        try:
            print(f"ok {name}: {check(clients, model)}")
        except CheckFailed as e:
            failed.append(name)
            print(f"FAIL {name}: {e}")
        except Exception as e:  # an unexpected error or a broken connection
            failed.append(name)
            print(f"FAIL {name}: {type(e).__name__}: {e}")
        sys.stdout.flush()
    if failed:
        print(f"{len(failed)} of {len(CHECKS)} checks failed: {', '.join(failed)}")
        return 1
    print(f"all {len(CHECKS)} checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
