#!/usr/bin/env python3
"""Writes the word-level model directory that `compare-routers` gives every router and engine.

`router-tools bench --prompt-format text` makes prompts of common English words joined by
single spaces (router-node/src/bench/prompt.rs, `WORDS`). A tokenizer with exactly one token
per such word, splitting at whitespace, makes a prompt of N words N tokens in every process
that reads it: Switchyard's nodes and simulated workers (`[tokenizer] kind = "huggingface"`),
Dynamo's frontend (the model directory) and the engines behind SGLang's and vLLM's gateways.
So a shared run of words is the same shared run of KV blocks whoever routes it.

Usage: make-word-tokenizer.py WORDS_TXT OUT_DIR
  WORDS_TXT  one word a line (tests/data/word-tokenizer/words.txt, bench's list)
  OUT_DIR    gets tokenizer.json, tokenizer_config.json and config.json

Needs the `tokenizers` library (in the peers' venv: scripts/install-peers.sh). The output for
the shipped list is checked in under tests/data/word-tokenizer/;
tests/tests/system/compare_routers.rs checks that it still has one token per word of bench's list.
"""

import json
import sys
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers

# Special tokens first, so their ids are fixed whatever the word list holds.
SPECIALS = ["[UNK]", "<s>", "</s>"]
# Dynamo's simulated engine (`dynamo.mocker`) answers with token ids between about 1,000 and
# 2,000, and its frontend streams nothing for an id the tokenizer cannot decode: filler tokens
# (`w<id>`, never in a prompt) fill the vocabulary up to this size.
VOCAB_SIZE = 4096
# Longer than any prompt of the shipped conversation trace (126,195 tokens).
MAX_LEN = 131072


def main() -> int:
    if len(sys.argv) != 3:
        print("usage: make-word-tokenizer.py WORDS_TXT OUT_DIR", file=sys.stderr)
        return 2
    words_path, out = Path(sys.argv[1]), Path(sys.argv[2])
    words = [w.strip() for w in words_path.read_text().splitlines() if w.strip()]
    if len(set(words)) != len(words):
        print(f"{words_path}: a word is listed twice", file=sys.stderr)
        return 2
    bad = [w for w in words if any(c.isspace() for c in w)]
    if bad:
        print(f"{words_path}: words with whitespace: {bad}", file=sys.stderr)
        return 2
    tokens = SPECIALS + words
    tokens += [f"w{i}" for i in range(len(tokens), VOCAB_SIZE)]
    if len(set(tokens)) != len(tokens):
        print(f"{words_path}: a word looks like a filler token (w<number>)", file=sys.stderr)
        return 2
    vocab = {token: i for i, token in enumerate(tokens)}

    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    # Decoded words are joined by single spaces.
    tokenizer.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    tokenizer.add_special_tokens(SPECIALS)

    out.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(out / "tokenizer.json"), pretty=True)
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": MAX_LEN,
        "unk_token": "[UNK]",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "add_bos_token": False,
        "add_eos_token": False,
        "chat_template": "{% for m in messages %}{{ m['content'] }}\n{% endfor %}",
    }
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2) + "\n")
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": len(vocab),
        "max_position_embeddings": MAX_LEN,
        "bos_token_id": vocab["<s>"],
        "eos_token_id": vocab["</s>"],
    }
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")

    check = tokenizer.encode(" ".join(words))
    if len(check.ids) != len(words) or vocab["[UNK]"] in check.ids:
        print("the tokenizer does not give one token per word", file=sys.stderr)
        return 1
    print(f"make-word-tokenizer: {len(words)} words in {len(vocab)} tokens, written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
