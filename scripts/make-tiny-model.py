#!/usr/bin/env python3
"""Writes a tiny random-weight Llama with a locally trained tokenizer into DIR, for real engines in tests.

Run it with the vLLM venv's interpreter (scripts/install-vllm.sh makes it):

    .tools/vllm/bin/python scripts/make-tiny-model.py .tools/models/tiny-llama
    .tools/vllm/bin/python scripts/make-tiny-model.py .tools/models/tiny-llama-b --vocab-size 600 \
        --lora-out .tools/models/tiny-llama-b-lora

`--vocab-size` trains a tokenizer of another size on the same corpus (a second model whose token
ids differ from the first's). `--lora-out ADAPTER_DIR` also writes a LoRA adapter of the model in
the PEFT layout vLLM loads (`--enable-lora --lora-modules NAME=ADAPTER_DIR`): rank 8 on every
layer's q_proj and v_proj, random weights.

No model hub is needed. The weights are random, so generated text is gibberish; what matters to a
router is that the engine tokenizes, caches prefixes and publishes KV events like it does for a real
model. The model: Llama, hidden 128, 4 heads (head dim 32: the CPU attention backend needs >= 32),
2 layers, intermediate 256, 4096 positions, float32, safetensors.

The tokenizer: byte-level BPE of about 1000 tokens trained here on the fixed corpus below, special
tokens <s>=0 </s>=1 <unk>=2 <pad>=3. It behaves like a Llama tokenizer where a router cares:

* Plain encoding adds BOS: `encode("hello world")` gives [0, ...]. The tokenizer.json
  post-processor prepends <s> and tokenizer_config.json says add_bos_token=true / add_eos_token=false,
  so every loader agrees. vLLM's /v1/completions encodes with special tokens, so a completion prompt
  reaches the engine as [<s>, ...text...].
* The chat template starts with `{{ bos_token }}` itself. vLLM renders the chat and encodes the result
  WITHOUT adding special tokens (ChatCompletionRequest.add_special_tokens defaults to false); the
  literal "<s>" in the rendered text is matched as the special token. So a chat reaches the engine with
  exactly one <s> at the start.

A router that wants the engine's token ids therefore encodes completion prompts with special tokens
and rendered chats without them.

Deterministic: the corpus and the seed are fixed, so two runs give byte-identical files. Idempotent:
when DIR already holds a complete model (the marker file written last), nothing is done.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

MARKER = "tiny-model.json"
FORMAT_VERSION = 1
VOCAB_SIZE = 1000
SPECIAL_TOKENS = ["<s>", "</s>", "<unk>", "<pad>"]  # ids 0..3 in this order

# Role markers are plain text (not special tokens); each turn ends with </s>.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\n' + message['content'] + eos_token + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}"
)

# Training text for the tokenizer, written for this script. Varied enough to give ~1000 merges.
CORPUS = """\
The freight yard wakes up before the town does. Long before the bakery opens its shutters, the
first shunting engine rolls out of the shed, its headlamp sweeping over rows of empty wagons. A
yard master in a glass tower decides which track each car will take, and a set of points clicks
over with a sound like a door closing somewhere far away.

Hello world! Hello, world. hello world? HELLO WORLD. Say hello to the world, then say goodbye.

Routing is mostly about patience. A request arrives, the router looks at what every worker is
doing, and it picks the one that can answer soonest. If two workers already hold the same long
prefix in their caches, the router prefers them: recomputing a thousand tokens costs far more
than waiting a few milliseconds for a busy queue to drain.

In the kitchen, Maria measured flour, sugar and butter with the care of a chemist. She cracked
three eggs into a blue bowl, whisked them until they turned pale, and folded everything together
with a wooden spoon. The oven hummed at 180 degrees. Twenty-five minutes later the whole flat
smelled of vanilla and lemon zest.

Weather report for Tuesday: cloudy in the morning with a chance of light rain, clearing by noon.
Winds from the north-west at 15 to 20 km/h. Highs of 17 degrees, lows of 9 overnight. On Wednesday
expect sunshine, a gentle breeze and temperatures climbing towards 22 degrees in the afternoon.

def add(a, b):
    return a + b

for i in range(10):
    print(i, add(i, i * 2))

{"model": "tiny", "prompt": "hello world", "max_tokens": 16, "temperature": 0.0}

The library closed at eight, but the reading room stayed lit for the night shift of volunteers who
were scanning old maps. Each sheet showed the valley as it was a century ago: three mills on the
river, a chapel on the hill, a narrow road that later became the motorway. The volunteers wrote
short notes beside each scan, describing faded ink, torn corners and handwritten corrections.

Question: what is the capital of France? Answer: Paris. Question: how many legs does a spider
have? Answer: eight. Question: which planet is closest to the sun? Answer: Mercury. Question: who
wrote the letters that nobody ever answered? Answer: nobody knows, and that is the story.

Numbers and dates appear everywhere: 1, 2, 3, 10, 42, 100, 256, 1024, 4096, 2024-05-17, 09:30,
3.14159, -7, 0.5, 99%, $12.50, 1,000,000. Versions like 0.32.0 and 2.13.0 show up in logs, next to
hexadecimal values such as 0x1f, 0xdeadbeef and ff00ff.

She said: "I will be there at seven, unless the train is late again." He replied that trains are
never late, only the passengers are early. They both laughed, because neither of them believed it.

A good test is small, fast and honest. It checks what a user would notice: the answer arrives, the
numbers add up, the error message names the field that was wrong. It does not sleep for a second
and hope that the world has changed in the meantime; it waits for the event it needs.

Mountains, rivers, forests and deserts: the atlas listed them by continent, then by height or by
length. The Nile, the Amazon, the Yangtze; Everest, Aconcagua, Denali, Kilimanjaro. Children
traced the borders with their fingers and argued about which country was the largest.

The user asked the assistant to summarise the meeting. The assistant wrote: the team agreed to ship
the new scheduler next week, to measure latency under load before and after, and to keep the old
path behind a flag until the numbers look right. Action items were assigned to three people.

Quick brown foxes jump over lazy dogs; sphinxes of black quartz judge vows; pack my box with five
dozen liquor jugs. Zebras, yaks and quails wander through the vivid jungle at dawn.
"""


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Write a tiny random-weight Llama and tokenizer into DIR.")
    p.add_argument("dir", metavar="DIR", help="output directory (created; skipped when already complete)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random weights (default 0)")
    p.add_argument("--vocab-size", type=int, default=VOCAB_SIZE, help=f"tokens of the trained tokenizer (default {VOCAB_SIZE})")
    p.add_argument("--lora-out", metavar="ADAPTER_DIR", help="also write a random LoRA adapter of the model there")
    return p.parse_args()


LORA_RANK = 8
HIDDEN = 128
LAYERS = 2


def write_lora(out: Path, model_dir: Path, seed: int) -> None:
    """A PEFT LoRA adapter (rank 8, q_proj and v_proj of every layer, random weights)."""
    if (out / "adapter_config.json").is_file() and (out / "adapter_model.safetensors").is_file():
        print(f"make-tiny-model: {out} already holds the adapter")
        return
    import torch
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed + 1)
    tensors = {}
    for layer in range(LAYERS):
        for proj in ("q_proj", "v_proj"):
            prefix = f"base_model.model.model.layers.{layer}.self_attn.{proj}"
            tensors[f"{prefix}.lora_A.weight"] = torch.randn(LORA_RANK, HIDDEN) * 0.01
            tensors[f"{prefix}.lora_B.weight"] = torch.randn(HIDDEN, LORA_RANK) * 0.01
    save_file(tensors, str(out / "adapter_model.safetensors"))
    config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": str(model_dir),
        "r": LORA_RANK,
        "lora_alpha": 16,
        "lora_dropout": 0.0,
        "bias": "none",
        "fan_in_fan_out": False,
        "target_modules": ["q_proj", "v_proj"],
    }
    (out / "adapter_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    print(f"make-tiny-model: wrote the adapter {out}")


def is_complete(out: Path, seed: int, vocab_size: int = VOCAB_SIZE) -> bool:
    marker = out / MARKER
    if not marker.is_file():
        return False
    try:
        info = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if info.get("format") != FORMAT_VERSION or info.get("seed") != seed:
        return False
    if info.get("vocab_size", VOCAB_SIZE) != vocab_size:
        return False
    return all((out / name).is_file() for name in info.get("files", []))


def train_tokenizer(vocab_size: int = VOCAB_SIZE):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=1,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS.splitlines(keepends=True), trainer=trainer)
    for i, name in enumerate(SPECIAL_TOKENS):
        if tok.token_to_id(name) != i:
            raise SystemExit(f"make-tiny-model: special token {name} got id {tok.token_to_id(name)}, expected {i}")
    # Llama-style: BOS in front of every encoded sequence, no EOS at the end.
    tok.post_processor = processors.Sequence(
        [
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(
                single="<s>:0 $A:0",
                pair="<s>:0 $A:0 <s>:1 $B:1",
                special_tokens=[("<s>", 0)],
            ),
        ]
    )
    return tok


def write_model(tmp: Path, seed: int, vocab_size: int = VOCAB_SIZE) -> list[str]:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = train_tokenizer(vocab_size)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        add_bos_token=True,
        add_eos_token=False,
        model_max_length=4096,
        clean_up_tokenization_spaces=False,
    )
    fast.save_pretrained(str(tmp))
    # The chat template and the BOS/EOS flags go into tokenizer_config.json, where every loader
    # (transformers 4 and 5, vLLM, Rust tokenizer crates) looks; transformers 5 would otherwise
    # write the template to a separate chat_template.jinja and leave the flags out.
    cfg_path = tmp / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    cfg.pop("backend", None)
    cfg.update(
        {
            "add_bos_token": True,
            "add_eos_token": False,
            "chat_template": CHAT_TEMPLATE,
            "tokenizer_class": "PreTrainedTokenizerFast",
        }
    )
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    (tmp / "chat_template.jinja").unlink(missing_ok=True)

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=4096,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=3,
        tie_word_embeddings=False,
        dtype="float32",
    )
    model = LlamaForCausalLM(config)
    model.save_pretrained(str(tmp), safe_serialization=True)
    return sorted(p.name for p in tmp.iterdir() if p.is_file())


def main() -> int:
    args = parse_args()
    out = Path(args.dir).resolve()
    if is_complete(out, args.seed, args.vocab_size):
        print(f"make-tiny-model: {out} already holds the model (seed {args.seed})")
        if args.lora_out:
            write_lora(Path(args.lora_out).resolve(), out, args.seed)
        return 0
    if out.exists() and not out.is_dir():
        print(f"make-tiny-model: {out} exists and is not a directory", file=sys.stderr)
        return 1
    try:
        import tokenizers  # noqa: F401
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        print(f"make-tiny-model: {e}; run this with the vLLM venv's python (.tools/vllm/bin/python)", file=sys.stderr)
        return 1

    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tiny-model-", dir=out))
    try:
        files = write_model(tmp, args.seed, args.vocab_size)
        for name in files:
            os.chmod(tmp / name, 0o644)
            os.replace(tmp / name, out / name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    # The marker goes last: a model interrupted half-way is rebuilt by the next run.
    marker = {"format": FORMAT_VERSION, "seed": args.seed, "files": files}
    if args.vocab_size != VOCAB_SIZE:
        marker["vocab_size"] = args.vocab_size
    (out / MARKER).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
    print(f"make-tiny-model: wrote {out} ({', '.join(files)})")
    if args.lora_out:
        write_lora(Path(args.lora_out).resolve(), out, args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
