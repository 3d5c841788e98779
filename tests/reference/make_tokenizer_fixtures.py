#!/usr/bin/env python3
"""Writes the byte-level BPE fixtures that Gantry's C++ tokenizer (data/) is checked against.

  /work/venv/bin/python tests/reference/make_tokenizer_fixtures.py [--out tests/reference/fixtures/tokenizer]

Deterministic: a fixed-seed corpus built here (no network), a byte-level BPE trained on it with
Hugging Face `tokenizers`, and the ids that `tokenizers` gives for edge cases and random slices.

  corpus.txt            ~80 KB of UTF-8: English-like prose, numbers, code, whitespace runs, many
                        scripts, emoji, combining marks, "<|endoftext|>" between documents.
  bpe/tokenizer.json    BPE (vocab 1000), ByteLevel(add_prefix_space=False) pre-tokenizer and decoder.
  bpe/vocab.json,
  bpe/merges.txt        the same model in GPT-2's two-file form (tok.model.save).
  prefix/tokenizer.json the same model with ByteLevel(add_prefix_space=True).
  cases.jsonl           {"tokenizer", "text", "ids", "roundtrip"} per line; ids from
                        encode(text, add_special_tokens=False), roundtrip = (decode(ids) == text).

Needs `tokenizers` (pip install tokenizers); CI does not.
"""
import argparse
import json
import os
import random
import sys

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "fixtures", "tokenizer")
SPECIALS = ["<|endoftext|>", "<|pad|>"]
EOT = "<|endoftext|>"

# --------------------------------------------------------------------------------------------
# Corpus
# --------------------------------------------------------------------------------------------

WORDS = """
the of and to in is was that for it with as on be at by this had not are but from or have an
they which one you were her all she there would their we him been has when who will more no if
out so said what up its about into than them can only other new some could time these two may
then do first any my now such like our over man me even most made after also did many before
must through back years where much your way well down should because each just those people
how too little state good very make world still own see men work long get here between both
life being under never day same another know while last might us great old year off come since
against go came right used take three house small found water light river stone garden market
window table paper letter morning evening summer winter city village road bridge train station
engine number system model data token vocabulary merge byte pair encoding training gradient
layer weight tensor shard worker server client request response error value function compute
memory cache thread queue buffer stream file record batch epoch step rate loss sample output
quick brown fox jumps lazy dog bright quiet heavy simple careful strange gentle sudden ancient
wonderful internationalization misunderstanding characteristically uncopyrightable
""".split()

CONTRACTIONS = ["don't", "it's", "we're", "I've", "I'm", "you'll", "he'd", "can't", "won't",
                "they're", "she's", "we've", "I'd", "that'll", "isn't", "JOHN'S", "WE'LL",
                "DON'T", "IT'S", "They'Re", "o'clock", "rock'n'roll", "'tis", "y'all"]

UNICODE_LINES = [
    "Le café était fermé, mais la crème brûlée reste délicieuse à Noël.",
    "El niño pidió más jamón; mañana será otro año en España.",
    "Der Müller über der Straße aß Brötchen mit Käse — schön!",
    "Ça va? Où est l'hôtel? Voilà, naïve façade, coöperate, Zoë.",
    "Καλημέρα κόσμε! Η γλώσσα είναι ελληνική, αλφάβητο ΑΒΓΔ.",
    "Привет, мир! Это русский текст: Москва, Ёлка, ЩУКА и ёж.",
    "Українська мова: їжак, ґанок, Євген.",
    "漢字と仮名の文章です。中文测试：你好，世界！繁體字也可以。",
    "ひらがな と カタカナ の テスト です。こんにちは、せかい。かなもじ ｶﾀｶﾅ",
    "한국어 문장입니다. 안녕하세요, 세계! 서울특별시.",
    "مرحبا بالعالم، هذه جملة عربية ١٢٣ و ٤٥٦.",
    "हिन्दी देवनागरी लिपि: नमस्ते दुनिया। संख्या ४२ है।",
    "ภาษาไทย สวัสดีครับ",
    "עברית: שלום עולם",
    "Emoji: 👍 👍🏽 👨‍👩‍👧 🇫🇷 🇯🇵 ❤️ 😀😃😄 🧑🏾‍💻 🏳️‍🌈 ✔️",
    "Combining: e\u0301 a\u0300 n\u0303 o\u0308\u0304 and precomposed é à ñ ȫ.",
    "No-break\u00a0space\u00a0here, ideographic\u3000space\u3000there, and zero\u200dwidth\u200djoiner.",
    "Odd: \ufeffBOM, \u200bZWSP, \ufffd replacement, \u2028line sep, \u2009thin space, \u00adsoft hyphen.",
    "Math: ∑ᵢ xᵢ² ≤ ∞, α→β, ∀x∈ℝ, ½ ¾ ², Ⅻ, 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝟙𝟚𝟛.",
    "Currency: €100, £50, ¥1000, ₹250, $3.50, ₿0.001.",
]

CODE_SNIPPETS = [
    "def train_step(model, batch, lr=3e-4):\n    logits = model(batch.x)\n"
    "    loss = cross_entropy(logits, batch.y)\n    loss.backward()\n    return loss.item()\n",
    "for (int i = 0; i < n; ++i) {\n\tif (a[i] != b[i] && i % 2 == 0) {\n"
    "\t\tsum += a[i] * b[i];\n\t}\n}\n",
    "if x >= 10 or y <= -3:\n        print(f\"x={x}, y={y}\")  # trailing comment   \n",
    "const std::vector<uint32_t>& ids = tok.encode(text);  // {a: [1, 2, 3]}\n",
    "SELECT id, name FROM users WHERE age > 21 AND name LIKE '%son';\n",
    "  x := map[string]int{\"a\": 1, \"b\": 2}\n\t\tfmt.Println(x[\"a\"] << 2 | 0xFF)\n",
    "<div class=\"row\"><span id='x'>&amp; &lt;tag&gt;</span></div>\r\n",
    "$ ./run.sh --threads=4 --out=/tmp/out.txt 2>&1 | tee log.txt\n",
    "{\"key\": [true, false, null], \"n\": -1.5e-10, \"s\": \"\\u00e9\\n\"}\n",
    "#include <stdio.h>\nint main(void){printf(\"%d\\n\",42);return 0;}\n",
]


def rand_number(r):
    k = r.randrange(9)
    if k == 0:
        return str(r.randrange(10))
    if k == 1:
        return str(r.randrange(10 ** r.randrange(2, 13)))
    if k == 2:
        return f"{r.randrange(10 ** r.randrange(1, 10)):,}"
    if k == 3:
        return f"{r.uniform(0, 1000):.{r.randrange(1, 7)}f}"
    if k == 4:
        return f"{r.randrange(1900, 2100)}-{r.randrange(1, 13):02d}-{r.randrange(1, 29):02d}"
    if k == 5:
        return f"{r.randrange(1, 29)}/{r.randrange(1, 13)}/{r.randrange(1900, 2100)}"
    if k == 6:
        return f"{r.randrange(24):02d}:{r.randrange(60):02d}:{r.randrange(60):02d}"
    if k == 7:
        return r.choice(["1", "12", "123", "1234", "3.14159", "1,000,000", "0.5%", "$19.99",
                         "v2.0.1", "10^6", "-42", "+7", "1e-5", "0x1F", "#3"])
    return f"{r.randrange(100)}%"


def sentence(r):
    n = r.randrange(4, 18)
    out = []
    for i in range(n):
        x = r.random()
        if x < 0.08:
            w = r.choice(CONTRACTIONS)
        elif x < 0.16:
            w = rand_number(r)
        else:
            w = r.choice(WORDS)
            if r.random() < 0.04:
                w = w.upper()
        if i == 0:
            w = w[:1].upper() + w[1:]
        if i < n - 1 and r.random() < 0.1:
            w += r.choice([",", ";", ":", " -", " —"])
        if r.random() < 0.03:
            w = r.choice(['"', "(", "'", "["]) + w + r.choice(['"', ")", "'", "]"])
        out.append(w)
    return " ".join(out) + r.choice([".", ".", ".", "!", "?", "...", "?!", ":"])


def whitespace_sep(r):
    return r.choice([" ", " ", " ", "  ", "   ", "\t", " \t ", "\u00a0", "\u3000", "     "])


def paragraph(r):
    kind = r.random()
    if kind < 0.55:
        parts = []
        for _ in range(r.randrange(1, 6)):
            parts.append(sentence(r))
            parts.append(whitespace_sep(r) if r.random() < 0.3 else " ")
        text = "".join(parts[:-1])
        if r.random() < 0.2:
            text += " " * r.randrange(1, 5)  # trailing spaces
        return text
    if kind < 0.75:
        return r.choice(CODE_SNIPPETS).rstrip("\n")
    if kind < 0.92:
        return " ".join(r.sample(UNICODE_LINES, r.randrange(1, 3)))
    # list / table-ish lines
    lines = []
    for _ in range(r.randrange(2, 6)):
        lines.append(r.choice(["- ", "* ", "  1. ", "\t", "| "]) + sentence(r))
    return "\n".join(lines)


def document(r):
    paras = [paragraph(r) for _ in range(r.randrange(2, 8))]
    out = paras[0]
    for p in paras[1:]:
        out += r.choice(["\n\n", "\n\n", "\n", "\n\n\n", "\r\n", "\r\n\r\n", "\n \n", "\n\t\n"]) + p
    return out


def build_corpus(r, target_bytes=80_000):
    docs = []
    size = 0
    while size < target_bytes:
        d = document(r)
        docs.append(d)
        size += len(d.encode("utf-8")) + len(EOT) + 2
    return ("\n" + EOT + "\n").join(docs) + "\n"


# --------------------------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------------------------

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# What Llama 3's pattern treats apart from GPT-2's.
LLAMA3_CASES = [
    "I'M HE'S They'Re we'VE you'Ll it'D don'T", "'S 'T", "\u017f's x'\u017f",
    "12345678 1234567 123 4567 1,234", "x123y 1a2b33c444d", "٣٤٥٦ ½¾ 12½",
    "(hello) [world] {x} \"quoted\" 'single' -dash _under", ".hello ,world ;x",
    "a\n\nb", "a \n \n b", "a  \n\n  b", "end.\n\n", "x\r\n\r\ny", "  \n", "\t\n\tz",
    "!!!\n\n\nnext", "?!\r\nz", " \u00a0\n x", "a\u3000\nb",
]

EDGE_CASES = [
    "", " ", "  ", "a", "  leading", "trailing   ", "a\n\n\nb", "\r\n", "a\r\nb\r\n", "\n", "\t\tx",
    "x\t", "don't I'LL we'Re", "It's he's THEY'RE i'M you'VE she'D 's 't", "''s", "123456789",
    "3.14", "1,000,000", "2024-03-15 12:30:45", "a1b2c3 12ab ab12", " 42  7 ",
    "Hello, world! How are you?", "Hello world", " Hello world", "hello   world   ",
    "café résumé naïve", "año niño mañana", "Straße Müller über",
    "Καλημέρα κόσμε", "Привет мир", "漢字テスト", "ひらがな カタカナ", "한국어 안녕하세요",
    "مرحبا بالعالم", "देवनागरी नमस्ते", "👍", "👍🏽", "👨‍👩‍👧", "🇫🇷🇯🇵", "I ❤️ emoji 😀!",
    "x\u00a0y", "a\u00a0\u00a0b", "a\u3000b", "\u3000\u3000x", "e\u0301", "cafe\u0301 e\u0301e\u0301",
    "<|endoftext|>", "a<|endoftext|>b", "<|endoftext|><|pad|>", " <|endoftext|> ",
    "doc one.\n<|endoftext|>\ndoc two", "<|endoftext", "<|pad|>x<|pad|>", "<<|endoftext|>>",
    "\ufffd", "a\u200db", "\ufeffstart", "\u200b", "\x00", "\x01\x02", "a\x7fb", "\x1b[31mred\x1b[0m",
    "\u2028\u2029", "\u0085x", "a\u2009b\u202fc", "\U0001F600\U0001F600 \U00010348",
    "a" * 500, " " * 300, "\n" * 50, "ab" * 200 + " " + "xyz" * 100,
    "  def f(x):\n\treturn x**2  # sq\n", "if(a!=b){c+=d;}", "http://example.com/a?b=c&d=e#f",
    "😀abc", "abc😀", "!!!???...", "--==++**", "... and\u00a0then",
    # Letters and digits new in Unicode 15-16 (tokenizers 0.23 classifies by 16.0; Python
    # 3.11's unicodedata, 14.0, calls them unassigned), and \x1c-\x1f, which Python's
    # isspace() counts and White_Space does not.
    "a\u1c89b \U000105c0x \U00031350\U00031351 \U0001e5d0y \U000116d0 7\U0001ccf0",
    "a\x1cb \x1d\x1e\x1f c",
]


def read_text(path):
    with open(path, encoding="utf-8", newline="") as f:
        return f.read()


def write_text(path, text):
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=DEFAULT_OUT)
    a = ap.parse_args()
    out = a.out
    os.makedirs(os.path.join(out, "bpe"), exist_ok=True)
    os.makedirs(os.path.join(out, "prefix"), exist_ok=True)

    r = random.Random(20240601)
    corpus = build_corpus(r)
    corpus_path = os.path.join(out, "corpus.txt")
    write_text(corpus_path, corpus)

    # Train. train_from_iterator on whole documents (not lines) so "\r\n" and blank-line runs
    # are seen as they are in the text.
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1000, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    docs = corpus.split("\n" + EOT + "\n")
    tok.train_from_iterator(docs, trainer=trainer)
    bpe_json = os.path.join(out, "bpe", "tokenizer.json")
    tok.save(bpe_json, pretty=True)
    tok.model.save(os.path.join(out, "bpe"))

    # Same model, add_prefix_space=True.
    cfg = json.loads(read_text(bpe_json))
    cfg["pre_tokenizer"]["add_prefix_space"] = True
    prefix_json = os.path.join(out, "prefix", "tokenizer.json")
    write_text(prefix_json, json.dumps(cfg, ensure_ascii=False, indent=2) + "\n")

    # Same model under Llama 3's pre-tokenizer: its Split pattern (case-insensitive
    # contractions, one leading non-letter joined to a word, digits in threes, newlines kept
    # with what precedes them), then ByteLevel without its own regex; and ignore_merges, as
    # Llama 3's tokenizer.json has it.
    os.makedirs(os.path.join(out, "llama3"), exist_ok=True)
    cfg = json.loads(read_text(bpe_json))
    cfg["model"]["ignore_merges"] = True
    cfg["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": LLAMA3_PATTERN}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
    llama3_json = os.path.join(out, "llama3", "tokenizer.json")
    write_text(llama3_json, json.dumps(cfg, ensure_ascii=False, indent=2) + "\n")

    toks = {"bpe": Tokenizer.from_file(bpe_json), "prefix": Tokenizer.from_file(prefix_json),
            "llama3": Tokenizer.from_file(llama3_json)}
    assert toks["prefix"].get_vocab() == toks["bpe"].get_vocab()

    # Cases: edge cases for both tokenizers, random slices of the corpus.
    rs = random.Random(7)
    slices = []
    for _ in range(60):
        n = 1 + int(1999 * rs.random() ** 2)  # 1..2000 chars, mostly short (keeps the files small)
        s = rs.randrange(0, len(corpus) - n)
        slices.append(corpus[s:s + n])
    cases = [("bpe", t) for t in EDGE_CASES + slices]
    cases += [("prefix", t) for t in EDGE_CASES]
    cases += [("prefix", t) for t in slices[:30]]
    cases += [("llama3", t) for t in EDGE_CASES + LLAMA3_CASES + slices[30:60]]

    bad = []
    lines = []
    for name, text in cases:
        t = toks[name]
        ids = t.encode(text, add_special_tokens=False).ids
        rt = t.decode(ids, skip_special_tokens=False) == text
        if not rt:
            bad.append((name, text))
        lines.append(json.dumps({"tokenizer": name, "text": text, "ids": ids, "roundtrip": rt},
                                ensure_ascii=False))
    write_text(os.path.join(out, "cases.jsonl"), "\n".join(lines) + "\n")

    # The two-file form must give the same ids (special tokens added back as added tokens).
    two = Tokenizer(models.BPE.from_file(os.path.join(out, "bpe", "vocab.json"),
                                         os.path.join(out, "bpe", "merges.txt")))
    two.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    two.decoder = decoders.ByteLevel()
    two.add_special_tokens(SPECIALS)
    for name, text in cases:
        if name == "bpe":
            assert two.encode(text, add_special_tokens=False).ids == \
                toks["bpe"].encode(text, add_special_tokens=False).ids, repr(text)

    write_text(os.path.join(out, "README.md"),
               "Generated by `tests/reference/make_tokenizer_fixtures.py` with Hugging Face "
               "`tokenizers` (fixed seeds, no network).\n"
               "Regenerate: `/work/venv/bin/python tests/reference/make_tokenizer_fixtures.py "
               "[--out tests/reference/fixtures/tokenizer]`.\n"
               "`bpe/vocab.json` + `bpe/merges.txt` are `tok.model.save()`: the special tokens "
               "(`<|endoftext|>` 0, `<|pad|>` 1) are in vocab.json but are not split out of text "
               "by a two-file loader unless it adds them; `cases.jsonl` ids are from "
               "`encode(text, add_special_tokens=False)`.\n")

    print(f"{len(cases)} cases ({sum(1 for c in cases if c[0] == 'bpe')} bpe, "
          f"{sum(1 for c in cases if c[0] == 'prefix')} prefix), corpus {len(corpus.encode())} bytes, "
          f"vocab {toks['bpe'].get_vocab_size()}")
    for name, text in bad:
        print(f"roundtrip false: {name} {text[:60]!r}", file=sys.stderr)


if __name__ == "__main__":
    main()
