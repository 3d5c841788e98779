#!/usr/bin/env python3
"""Checks that each library and daemon depends only on what it may (docs/architecture.md,
"Libraries and what they may use").

  python3 scripts/check_deps.py --build BUILD [--source DIR]
      [--inject-link BINARY=LIB] [--inject-include FILE=HEADER]

Two checks:
  - links: the link command of each daemon and front end (from Ninja: `ninja -t commands`)
    names no library it must not link, for example the coordinator the trainer;
  - includes: no source file of a directory includes a header of a directory it must not
    use, for example spec/ a worker header.
--inject-* add a forbidden link or include to what is checked (nothing is changed on disk):
the test uses them to show that the check fails on one. Exits 1 and names every breach.
"""
import argparse
import os
import re
import subprocess
import sys

# Libraries a binary must not link: what each name stands for, matched on the link command.
TRAINER = ["libgantry_worker.a", "libgantry_agent.a", "libgantry_parallel.a", "libgantry_parallel_nccl.a",
           "libgloo", "libnccl"]
MODEL = ["libgantry_model.a", "libgantry_kernels.a", "libgantry_kernels_cuda.a", "libgantry_remote_checkpoint.a",
         "libgantry_backends.a", "libgantry_kernels_cuda_emulated.a", "libgantry_cuda_emulator.a",
         "libopenblas", "libcudart", "libcublas"]
LINK_RULES = {
    # the coordinator: the spec, the shard-server client, common; never the model or trainer
    "coordinator/gantry-coordinator": TRAINER + MODEL,
    # the CLI: the spec and the model (export, sample), never the trainer or collectives
    "cli/gantry": TRAINER,
    # the shard server: AdamW's kernel, never the model or the trainer
    "shardserver/gantry-shardserver": TRAINER + ["libgantry_model.a", "libgantry_remote_checkpoint.a"],
}

# Include prefixes each source directory must not use.
INCLUDE_RULES = {
    "common/": ["worker/", "kernels/", "spec/", "coordinator/", "shardserver/", "cli/"],
    "spec/": ["worker/", "kernels/", "coordinator/", "shardserver/", "cli/", "gantry/v1/", "grpcpp/"],
    "kernels/": ["worker/", "spec/", "coordinator/", "shardserver/", "cli/"],
    # RocksDB only through common/rocks.h, the one wrapper (with the kill points)
    "coordinator/": ["worker/", "kernels/", "cli/", "rocksdb/"],
    "shardserver/": ["worker/", "coordinator/", "cli/", "rocksdb/"],
    "worker/": ["coordinator/", "cli/"],
}
INCLUDE = re.compile(r'^\s*#\s*include\s+[<"]([^">]+)[">]', re.M)


def link_command(build, binary):
    out = subprocess.run(["ninja", "-C", build, "-t", "commands", binary], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"check_deps: ninja knows no target {binary} in {build}: {out.stderr.strip()}")
    lines = [l for l in out.stdout.splitlines() if f"-o {binary}" in l]
    if not lines:
        sys.exit(f"check_deps: no link command for {binary}")
    return lines[-1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--source", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--inject-link", action="append", default=[])
    ap.add_argument("--inject-include", action="append", default=[])
    a = ap.parse_args()
    breaches = []

    injected_links = {}
    for spec in a.inject_link:
        binary, lib = spec.split("=", 1)
        injected_links.setdefault(binary, []).append(lib)
    for binary, forbidden in LINK_RULES.items():
        cmd = link_command(a.build, binary).split() + injected_links.get(binary, [])
        for word in cmd:
            base = os.path.basename(word)
            for f in forbidden:
                if base.startswith(f):
                    breaches.append(f"{binary} links {word} (it must not link {f})")

    injected_includes = {}
    for spec in a.inject_include:
        path, header = spec.split("=", 1)
        injected_includes.setdefault(path, []).append(header)
    src = os.path.abspath(a.source)
    files = 0
    for d, forbidden in INCLUDE_RULES.items():
        for root, _, names in os.walk(os.path.join(src, d)):
            for n in sorted(names):
                if not n.endswith((".h", ".cc", ".cu", ".cuh")):
                    continue
                path = os.path.join(root, n)
                rel = os.path.relpath(path, src)
                with open(path, encoding="utf-8") as f:
                    headers = INCLUDE.findall(f.read()) + injected_includes.get(rel, [])
                files += 1
                for h in headers:
                    for f in forbidden:
                        if h.startswith(f):
                            breaches.append(f"{rel} includes {h} ({d} must not use {f})")

    if breaches:
        print("check_deps: %d forbidden dependenc%s:" % (len(breaches), "y" if len(breaches) == 1 else "ies"))
        for b in breaches:
            print("  " + b)
        return 1
    print(f"check_deps: {len(LINK_RULES)} binaries' links and {files} files' includes keep the library rules")
    return 0


if __name__ == "__main__":
    sys.exit(main())
