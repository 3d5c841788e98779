#!/usr/bin/env python3
"""Gantry's byte-level BPE tokenizer against Hugging Face `tokenizers`, on the same text, tokenizer
and thread count, measured in one run. Prints each figure and the ratio (goal: Gantry >= 1.0x).

  python3 bench/tokenizer_vs_hf.py [--tokenizer tests/reference/fixtures/tokenizer/bpe/tokenizer.json]
      [--mb 20] [--threads N (default: all cores)] [--gantry build/bench/tokenizer_bench]

The text: documents of the fixture corpus (tests/reference/fixtures/tokenizer/corpus.txt) with
their paragraphs shuffled and recombined (fixed seed) up to --mb MB, written to a temporary file
as documents joined by "\\n\\n". No document contains "\\n\\n" or starts or ends with "\\n", so
splitting the file on "\\n\\n" gives back exactly the documents; no document contains a special
token. Both sides encode each document on its own (no special tokens added) and count the tokens.

HF: Tokenizer.from_file(...).encode_batch(documents, add_special_tokens=False) (or
encode_batch_fast, --hf-api), with RAYON_NUM_THREADS=N and TOKENIZERS_PARALLELISM set before
tokenizers is imported; best of --repeat runs. The time includes building the Python Encoding
objects, which is part of what encode_batch costs a caller.
Gantry: GANTRY --tokenizer PATH --text FILE --threads N --repeat R; its last stdout line is JSON
{"impl": "gantry", "tokens", "seconds" (best of the repeats), "tokens_per_s", "threads"}.

Needs a Python with tokenizers (for example /work/venv/bin/python).
"""
import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))
FIXTURES = os.path.join(ROOT, "tests", "reference", "fixtures", "tokenizer")
EOT = "<|endoftext|>"


def build_documents(corpus, target_bytes, seed=1234):
    """Documents of ~3-10 paragraphs drawn from the corpus's paragraphs, shuffled with a fixed seed."""
    paras = []
    for doc in corpus.split(EOT):
        for p in re.split(r"\n{2,}", doc):
            p = p.strip("\n")
            if p.strip():
                paras.append(p)
    r = random.Random(seed)
    docs, size = [], 0
    while size < target_bytes:
        order = paras[:]
        r.shuffle(order)
        i = 0
        while i < len(order) and size < target_bytes:
            k = r.randrange(3, 11)
            doc = "\n".join(order[i:i + k])
            i += k
            # Vary the text a little so repeats are not position-for-position identical.
            if r.random() < 0.5:
                doc = f"{r.randrange(10 ** r.randrange(1, 7))} " + doc
            doc = re.sub(r"\n{2,}", "\n", doc).strip("\n")
            docs.append(doc)
            size += len(doc.encode("utf-8")) + 2
    return docs


def run_hf(path, docs, repeat, api):
    import tokenizers  # imported after RAYON_NUM_THREADS is set
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(path)
    encode = getattr(tok, api)
    encode(docs[:64], add_special_tokens=False)  # starts the thread pool
    try:  # threads of this process besides the main one: the rayon pool (Linux only)
        pool = len(os.listdir("/proc/self/task")) - 1
    except OSError:
        pool = None
    best, tokens = None, None
    for _ in range(repeat):
        c0 = time.process_time()
        t0 = time.perf_counter()
        enc = encode(docs, add_special_tokens=False)
        dt = time.perf_counter() - t0
        cpu = time.process_time() - c0
        n = sum(len(e) for e in enc)
        del enc
        if tokens is not None and n != tokens:
            sys.exit(f"HF token count changed between runs: {tokens} vs {n}")
        tokens = n
        if best is None or dt < best[0]:
            best = (dt, cpu)
    return {"impl": "hf_tokenizers", "tokens": tokens, "seconds": best[0],
            "tokens_per_s": tokens / best[0], "cpu_over_wall": best[1] / best[0],
            "version": tokenizers.__version__, "api": api, "pool_threads": pool}


def run_gantry(binary, tokenizer, text_path, threads, repeat):
    cmd = [binary, "--tokenizer", tokenizer, "--text", text_path, "--threads", str(threads),
           "--repeat", str(repeat)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.stderr.write(p.stdout + p.stderr)
        sys.exit(f"{' '.join(cmd)} failed with exit status {p.returncode}")
    lines = [l for l in p.stdout.strip().splitlines() if l.strip()]
    try:
        return json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        sys.stderr.write(p.stdout + p.stderr)
        sys.exit(f"{binary}: the last stdout line is not JSON")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", default=os.path.join(FIXTURES, "bpe", "tokenizer.json"))
    ap.add_argument("--corpus", default=os.path.join(FIXTURES, "corpus.txt"))
    ap.add_argument("--mb", type=float, default=20.0, help="size of the text in MB (10^6 bytes)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--repeat", type=int, default=3, help="runs of each; the best is reported")
    ap.add_argument("--gantry", default=os.path.join(ROOT, "build", "bench", "tokenizer_bench"))
    ap.add_argument("--hf-api", choices=["encode_batch", "encode_batch_fast"], default="encode_batch",
                    help="encode_batch_fast skips offsets (tokenizers >= 0.20)")
    ap.add_argument("--keep-text", metavar="FILE", help="write the text here and keep it")
    a = ap.parse_args()
    if a.threads < 1 or a.mb <= 0 or a.repeat < 1:
        ap.error("--threads, --mb and --repeat must be positive")
    for what, path in (("tokenizer", a.tokenizer), ("corpus", a.corpus)):
        if not os.path.isfile(path):
            ap.error(f"{what} {path} not found")
    if not (os.path.isfile(a.gantry) and os.access(a.gantry, os.X_OK)):
        print(f"Gantry tokenizer benchmark binary {a.gantry} not found (or not executable); build it "
              f"(for example: cmake --build build --target tokenizer_bench) or pass --gantry PATH.",
              file=sys.stderr)
        sys.exit(2)

    # Before tokenizers is imported: its rayon pool reads these once.
    os.environ["RAYON_NUM_THREADS"] = str(a.threads)
    os.environ["TOKENIZERS_PARALLELISM"] = "true" if a.threads > 1 else "false"

    with open(a.corpus, encoding="utf-8", newline="") as f:
        corpus = f.read()
    docs = build_documents(corpus, int(a.mb * 1e6))
    text = "\n\n".join(docs)
    nbytes = len(text.encode("utf-8"))

    tmpdir = None
    if a.keep_text:
        text_path = a.keep_text
    else:
        tmpdir = tempfile.TemporaryDirectory(prefix="gantry_tok_bench_")
        text_path = os.path.join(tmpdir.name, "text.txt")
    with open(text_path, "w", encoding="utf-8", newline="") as f:
        f.write(text)
    del text
    print(f"text: {len(docs)} documents, {nbytes / 1e6:.1f} MB ({text_path}); "
          f"tokenizer {os.path.relpath(a.tokenizer)}; threads {a.threads}", flush=True)

    hf = run_hf(a.tokenizer, docs, a.repeat, a.hf_api)
    print(f"HF tokenizers {hf['version']} {hf['api']}: {hf['tokens']} tokens, best {hf['seconds']:.3f} s, "
          f"{hf['tokens_per_s']:,.0f} tok/s (RAYON_NUM_THREADS={a.threads}, pool threads seen "
          f"{hf['pool_threads']}, cpu/wall {hf['cpu_over_wall']:.2f})", flush=True)
    del docs

    g = run_gantry(a.gantry, a.tokenizer, text_path, a.threads, a.repeat)
    if tmpdir is not None:
        tmpdir.cleanup()
    if g.get("tokens") != hf["tokens"]:
        print(f"token counts differ: gantry {g.get('tokens')} vs HF tokenizers {hf['tokens']}",
              file=sys.stderr)
        sys.exit(1)
    if g.get("threads", a.threads) != a.threads:
        print(f"warning: gantry reports {g.get('threads')} threads, asked for {a.threads}", file=sys.stderr)
    g_tps = g["tokens"] / g["seconds"] if g.get("seconds") else float(g["tokens_per_s"])
    ratio = g_tps / hf["tokens_per_s"]
    print(f"gantry {g_tps:,.0f} tok/s | HF tokenizers {hf['tokens_per_s']:,.0f} tok/s "
          f"(threads {a.threads}) | ratio {ratio:.2f} (goal >= 1.0)")
    print(json.dumps({"bench": "tokenizer_vs_hf", "tokens": hf["tokens"], "bytes": nbytes,
                      "threads": a.threads, "gantry_tokens_per_s": g_tps,
                      "gantry_seconds": g.get("seconds"),
                      "hf_tokens_per_s": hf["tokens_per_s"], "hf_seconds": hf["seconds"],
                      "hf_version": hf["version"], "hf_api": hf["api"],
                      "hf_pool_threads": hf["pool_threads"], "ratio": ratio}))


if __name__ == "__main__":
    main()
