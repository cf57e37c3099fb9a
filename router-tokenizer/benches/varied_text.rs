//! Deterministic "varied" text for the tokenizer benchmark and the split-equals-whole tests:
//! prose, code with indentation, JSON, numbers, Markdown, tabs, runs of blank lines and
//! trailing spaces, accented, Cyrillic, CJK and emoji words. Shared by `benches/tokenize.rs`
//! and the tests (`tests/integration/main.rs`; included with `#[path]`).

const WORDS: &[&str] = &[
    "the",
    "router",
    "counts",
    "tokens",
    "of",
    "every",
    "prompt",
    "and",
    "hashes",
    "blocks",
    "worker",
    "cache",
    "prefix",
    "engine",
    "request",
    "queue",
    "class",
    "deadline",
    "a",
    "is",
    "when",
    "with",
    "without",
    "don't",
    "it's",
    "we'll",
    "they've",
    "I'm",
    "naïve",
    "café",
    "Zürich",
    "résumé",
    "привет",
    "мир",
    "日本語",
    "東京",
    "😀",
    "🚀",
    "über",
    "façade",
    "HTTP",
    "JSON",
    "vLLM",
    "KV",
    "GPU",
    "p99",
    "x86_64",
    "UTF-8",
    "e.g.",
    "i.e.",
];

const CODE: &[&str] = &[
    "fn main() {",
    "    let x = vec![1, 2, 3];",
    "    for (i, v) in x.iter().enumerate() {",
    "        println!(\"{i}: {v}\");",
    "    }",
    "}",
    "def tokenize(text: str) -> list[int]:",
    "\treturn [ord(c) for c in text]  # naive",
    "if (a && b || !c) { return -1; }",
    "SELECT id, name FROM users WHERE age >= 21;",
];

/// A small deterministic generator (a 64-bit LCG), so every run sees the same text.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) as usize) % n.max(1)
    }
}

/// About `bytes` bytes (at least that many, cut at a character boundary) of varied text
/// from `seed`.
pub fn varied_text(bytes: usize, seed: u64) -> String {
    let mut rng = Lcg(seed ^ 0x9e37_79b9_7f4a_7c15);
    let mut out = String::with_capacity(bytes + 256);
    while out.len() < bytes {
        match rng.next(8) {
            0..=3 => prose(&mut rng, &mut out),
            4 => {
                let start = rng.next(CODE.len());
                for line in CODE.iter().cycle().skip(start).take(1 + rng.next(6)) {
                    out.push_str(line);
                    out.push('\n');
                }
            }
            5 => {
                let (a, b) = (rng.next(100_000), rng.next(1000));
                out.push_str(&format!(
                    "{{\"id\": {a}, \"score\": {b}.{:02}, \"tags\": [\"x\", \"y\"], \"ok\": true}}\n",
                    rng.next(100)
                ));
            }
            6 => {
                out.push_str(&format!(
                    "- item {}: 2026-{:02}-{:02} at {:02}:{:02}, cost ${}.{:02}\n",
                    rng.next(50),
                    1 + rng.next(12),
                    1 + rng.next(28),
                    rng.next(24),
                    rng.next(60),
                    rng.next(10_000),
                    rng.next(100)
                ));
            }
            _ => {
                let ws = ["\n\n", "\n\n\n", "  \n", " \t\n", "\r\n", "\n    \n", "   "];
                out.push_str(ws[rng.next(ws.len())]);
            }
        }
    }
    out
}

fn prose(rng: &mut Lcg, out: &mut String) {
    let words = 5 + rng.next(20);
    for i in 0..words {
        let word = WORDS[rng.next(WORDS.len())];
        if i == 0 {
            let mut chars = word.chars();
            if let Some(first) = chars.next() {
                out.extend(first.to_uppercase());
                out.push_str(chars.as_str());
            }
        } else {
            out.push_str(word);
        }
        match rng.next(12) {
            0 => out.push_str(", "),
            1 => out.push_str(" ("),
            2 => out.push_str(") "),
            3 => out.push_str("  "),
            _ => out.push(' '),
        }
    }
    out.push_str([". ", "! ", "? ", ".\n", ":\n"][rng.next(5)]);
}
