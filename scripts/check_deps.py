#!/usr/bin/env python3
"""Checks that each library and daemon depends only on what it may (docs/architecture.md,
"Libraries and what they may use"), and that the tree speaks of them by their names of today.

One script over 700 lines on purpose: its rule tables (ALLOWED, LIBRARY_RULES, RETIRED,
NAMESPACES, HAND_CHECKS, ...) come first and each check after them is a function of a few
dozen lines; tests/deps_test.sh injects a breach of each through the one command line. Kept
in one file so that the rules and the checks that read them are read together.

  python3 scripts/check_deps.py [--build BUILD] [--source DIR]
      [--inject-link BINARY=LIB] [--inject-include FILE=HEADER] [--inject-text FILE=TEXT]

Four checks:
  - links: the link command of each daemon and front end (from Ninja: `ninja -t commands`)
    names no library it must not link, for example the coordinator the trainer; and CMake's
    link graph (BUILD/link_graph.txt, written at configure time) leads from no library of
    LIBRARY_RULES to one it must not reach, for example from the checkpoint format to the
    kernels, OpenBLAS or OpenMP;
  - includes: each folder's sources include, of this project, only the folders below it
    (ALLOWED, the floors), and none of the other libraries it must not use;
  - names: no tracked text file (code, comments, CMake, docs) names a retired folder, library
    or namespace (RETIRED), or a type or function under the namespace it left (MOVED_OUT):
    the restructure of docs/decisions.md ("Folder = library = namespace") moved them, and
    an old name sends a reader grepping for it nowhere; no header re-exports another
    namespace's type under an alias (ALIAS); and a file whose namespace is spelled through
    GANTRY_CUDA_NS names it in its first line (NS_MACRO);
  - namespaces: a source file defines things only in its folder's namespace or one listed, with
    why, for its folder or itself (NAMESPACES, FILE_NAMESPACES), and docs/architecture.md names
    every namespace listed;
  - checks: a GPU library's result is checked with GPU_RETURN_IF_ERROR, not by hand (compared
    with its success value, `!= cudaSuccess`; a Status built on `!GpuOk(r)`; the library's error
    words taken), but where HAND_CHECKS says why and how many;
  - tests: every folder under tests/ is a source folder's twin (tests mirror the sources) or
    one of the whole tree's tests that TEST_FOLDERS_OF_THE_WHOLE lists with why;
  - capabilities: what a backend can do is asked through `Backend::Supports(Capability)`
    (kernels/backend.h, docs/decisions.md "The backend's capabilities in one query"): no other
    `bool` virtual is declared on the backend interface or overridden by a backend; and
    docs/decisions.md's count of the interface's virtuals is the header's (BACKEND_COUNT).
--inject-link LIBRARY=LIB (a name without a slash) adds an edge to the link graph.
--inject-* add a forbidden link, include or line of text to what is checked (nothing is
changed on disk): the test uses them to show that the check fails on one. Exits 1 and names
every breach.
"""
import argparse
import os
import re
import subprocess
import sys

# Libraries a binary must not link: what each name stands for, matched on the link command.
TRAINER = ["libgantry_train.a", "libgantry_agent.a", "libgantry_comm_gloo.a",
           "libgantry_comm_nccl.a", "libgloo", "libnccl"]
MODEL = ["libgantry_model.a", "libgantry_optim.a", "libgantry_checkpoint.a", "libgantry_checkpoint_remote.a",
         "libgantry_kernels.a", "libgantry_kernels_cuda.a", "libgantry_backends.a",
         "libgantry_kernels_cuda_emulated.a", "libgantry_cuda_emulator.a", "libopenblas", "libcudart", "libcublas"]
GPU = ["libgantry_backends.a", "libgantry_kernels_cuda.a", "libgantry_kernels_cuda_emulated.a",
       "libgantry_cuda_emulator.a", "libcudart", "libcublas", "libcudnn", "libnccl", "libcuda.", "CUDA::"]
LINK_RULES = {
    # the coordinator: the job spec, the shard-server client, common; never the model or trainer
    "coordinator/gantry-coordinator": TRAINER + MODEL,
    # the CLI, a client people install on laptops: the job spec, checkpoints and, for sample
    # alone (gantry_cli_model), the model on the cpu backend; never the trainer, collectives or
    # a GPU library. Its other commands' library is held to more below (LIBRARY_RULES).
    "cli/gantry": TRAINER + GPU,
    # the shard server: AdamW's kernel, never the model or the trainer
    "shardserver/gantry-shardserver": TRAINER + ["libgantry_model.a", "libgantry_checkpoint.a",
                                                 "libgantry_checkpoint_remote.a"],
}

# Libraries that must not reach others through CMake's link graph (BUILD/link_graph.txt), at
# any depth: a name, or a part of a library's path. KERNELS: what running the model takes,
# its kernels and their OpenBLAS and OpenMP. The checkpoint format, the Hugging Face format
# and the gantry commands that run no model (submit, jobs, checkpoints, download, export,
# plan ...) link none of it (docs/decisions.md, "The CLI's libraries"); reading a checkpoint
# into a model is gantry_checkpoint_gpt's, sampling gantry_cli_model's.
KERNELS = ["gantry_model", "gantry_optim", "gantry_kernels", "gantry_backends", "gantry_blas", "OpenMP::",
           "gantry_checkpoint_gpt", "gantry_cli_model", "libopenblas", "libgomp", "libomp"]
LIBRARY_RULES = {
    "gantry_jobspec": KERNELS,
    "gantry_hf": KERNELS,
    "gantry_checkpoint": KERNELS,
    "gantry_checkpoint_remote": KERNELS,
    "gantry_cli_export": KERNELS,
    "gantry_cli": KERNELS,
}

# The floors: the project folders a folder's sources may include (besides its own). Every
# folder of the tree is listed (the most specific entry applies), so a new edge is a decision
# written here. Top to bottom, as in docs/architecture.md's picture.
BASE = ["common/"]
ALLOWED = {
    "common/": ["gantry/v1/"],
    "kernels/": BASE,
    "jobspec/": BASE,
    "data/": BASE,
    "comm/": BASE + ["jobspec/", "kernels/"],
    "optim/": BASE + ["jobspec/", "kernels/"],
    # the Hugging Face format: kernels/types.h for Precision and the bf16 rounding (header only)
    "hf/": BASE + ["jobspec/", "kernels/types.h"],
    "model/": BASE + ["jobspec/", "kernels/", "comm/", "hf/"],
    # the format runs no model: the optimizer's header-only types, not its kernels
    "checkpoint/": BASE + ["jobspec/", "hf/", "data/", "kernels/types.h", "optim/loss_scale.h",
                           "optim/shard_segment.h"],
    # a checkpoint into a model::GPT
    "checkpoint/gpt/": BASE + ["jobspec/", "hf/", "data/", "kernels/", "model/", "optim/", "comm/", "checkpoint/"],
    # the remote source reads through the shard servers' client
    "checkpoint/remote/": BASE + ["jobspec/", "hf/", "data/", "kernels/types.h", "optim/loss_scale.h",
                                  "optim/shard_segment.h", "checkpoint/", "shardserver/client/shard_client.h",
                                  "gantry/v1/"],
    "worker/train/": BASE + ["jobspec/", "hf/", "kernels/", "model/", "optim/", "data/", "comm/", "checkpoint/"],
    "worker/protocol/": BASE + ["gantry/v1/"],
    # a GPU worker's device metrics: NVML (loaded at run time) or the emulator's devices
    "worker/gpu_metrics/": BASE + ["kernels/emulated/usage.h"],
    "worker/agent/": BASE + ["jobspec/", "hf/", "kernels/", "model/", "optim/", "data/", "comm/", "checkpoint/",
                             "worker/train/", "worker/protocol/", "worker/gpu_metrics/", "shardserver/client/shard_client.h",
                             "gantry/v1/"],
    "worker/": BASE + ["jobspec/", "hf/", "kernels/", "model/", "optim/", "data/", "comm/", "checkpoint/",
                       "worker/train/", "worker/protocol/", "worker/gpu_metrics/", "worker/agent/", "gantry/v1/"],
    "coordinator/": BASE + ["jobspec/", "shardserver/client/shard_client.h", "gantry/v1/"],
    "shardserver/": BASE + ["kernels/adamw.h", "gantry/v1/"],
    # gantry's commands run no model (their library links no kernels: LIBRARY_RULES) ...
    "cli/": BASE + ["jobspec/", "hf/", "data/", "checkpoint/", "kernels/types.h", "shardserver/client/shard_client.h",
                    "gantry/v1/"],
    # ... but sample's, gantry_cli_model, which both front ends link
    "cli/model_commands.h": BASE + ["cli/"],
    "cli/model_commands.cc": BASE + ["jobspec/", "hf/", "data/", "kernels/", "model/", "cli/"],
    # gantry-train (its own binary, which links the trainer): calibrate times Gloo's all-reduce;
    # sample and export are gantry's (cli/model_commands.h, gantry_cli_model; cli/export_checkpoint.h,
    # gantry_cli_export)
    "cli/train/": BASE + ["jobspec/", "hf/", "kernels/", "model/", "optim/", "data/", "checkpoint/", "worker/train/",
                          "comm/", "cli/train/", "cli/model_commands.h", "cli/export_checkpoint.h", "gantry/v1/"],
}
# Where the allowed list is folders of this project, these are too (a header outside them is
# another library's: absl, gRPC ...).
PROJECT = ["common/", "gantry/v1/", "kernels/", "jobspec/", "hf/", "data/", "comm/", "optim/", "model/", "checkpoint/",
           "worker/", "coordinator/", "shardserver/", "cli/", "bench/", "tests/"]
# Other libraries a folder must not use: RocksDB only through common/rocks.h (the one wrapper,
# with the kill points); the job spec no gRPC (the coordinator and the CLI link it alone).
FORBIDDEN_EXTERNAL = {
    "jobspec/": ["grpcpp/", "gloo/", "rocksdb/"],
    "kernels/": ["grpcpp/", "gloo/", "rocksdb/"],
    "model/": ["grpcpp/", "gloo/", "rocksdb/"],
    "coordinator/": ["rocksdb/"],
    "shardserver/": ["rocksdb/"],
}


# Retired names: a pattern, and what it is called now. Matched on every text file git keeps or
# would keep but RETIRED_EXEMPT (a path as written from the root: tests/worker/... is not
# worker/...). A name retired in a later move is a line added here.
RETIRED = [
    (r"(?<![\w/.-])worker/parallel\b|(?<![\w/.-])parallel/(?:\s*//\s*)?[a-z_]+\.(?:h|cc)\b",
     "worker/parallel/ is retired: comm/ (communicator.h, groups.h, comm_thread.h), comm/gloo/, "
     "comm/nccl/, and worker/agent/device_groups.h"),
    (r"\bgantry_parallel\w*", "gantry_parallel* is retired: gantry_comm_gloo, gantry_comm_nccl, gantry_agent"),
    (r"(?<![\w:])parallel::|\bgantry::parallel\b|\bnamespace\s+parallel\b",
     "namespace parallel is retired: comm:: (communicators, groups) or agent:: (DeviceGroups)"),
    (r"\bgantry_spec\b", "gantry_spec is retired: gantry_jobspec"),
    (r"(?<![\w/.-])spec/(?=[a-z_]+\.(?:h|cc)\b)", "spec/ is retired: jobspec/"),
    (r"(?<![\w:])spec::|\bgantry::spec\b", "namespace spec is retired: jobspec::"),
    (r"\bgantry_remote_checkpoint\b", "gantry_remote_checkpoint is retired: gantry_checkpoint_remote"),
    (r"(?<![\w/.-])worker/model/", "worker/model/ is retired: model/"),
    (r"(?<![\w/.-])worker/data/", "worker/data/ is retired: data/"),
    (r"(?<![\w/.-])worker/agent/shard_client\b",
     "worker/agent/shard_client is retired: checkpoint/remote/shard_source, shardserver/client/shard_client"),
    (r"(?<![\w/.-])worker/train/(?:optimizer|loss_scale|checkpoint|checkpoint_writer|sample)\b",
     "worker/train/'s optimizer, loss scale, checkpoint and sample moved: optim/adamw, optim/loss_scale.h, "
     "checkpoint/checkpoint, checkpoint/writer, model/sample"),
]
# Names that left a namespace that still exists: `old::Name` is a breach for every type or
# function declared (at file level) in these headers, unless the old namespace's own headers
# still declare that name. Read from the headers, so a name added there is covered.
MOVED_OUT = {
    "agent": ("worker/agent/", ["shardserver/client/shard_client.h", "checkpoint/remote/shard_source.h"]),
    "train": ("worker/train/", ["optim/adamw.h", "optim/loss_scale.h", "checkpoint/checkpoint.h",
                                "checkpoint/writer.h", "model/sample.h"]),
}
# Files that may name what is retired: the record of the renames themselves, and this script.
RETIRED_EXEMPT = {
    "docs/decisions.md": "the decision records say what each folder, library and namespace was called",
    "scripts/check_deps.py": "the retired names' patterns",
    "tests/deps_test.sh": "the retired names it injects to show that the check fails on one",
}
TEXT_EXT = (".h", ".cc", ".cu", ".cuh", ".inc", ".py", ".sh", ".proto", ".txt", ".md", ".yaml", ".yml",
            ".cmake", ".json", ".service", "Dockerfile")
DECLARED = re.compile(r"^(?:template\s*<[^>]*>\s*)?(?:(?:class|struct|enum(?:\s+class)?)\s+(\w+)"
                      r"|using\s+(\w+)\s*="
                      r"|(?:inline\s+|static\s+|constexpr\s+)*[\w:][\w:<>,*& ]*?[\s*&](\w+)\()", re.M)


# No alias keeps a name alive in a second namespace (docs/decisions.md, "Rejected: re-exporting
# types"): `using X = ns::Y;` in a header at file or class scope, ns a namespace of this
# project, is a breach outside ALIAS_EXEMPT. (A .cc's shorthand is its own: nothing sees it.)
ALIAS = re.compile(r"^(?:  )?using\s+(\w+)\s*=\s*(?:::)?(?:gantry::)?(\w+)::[\w:]+\s*;", re.M)
ALIAS_EXEMPT = {
    "kernels/emulated/device.h": "dim3 is CUDA's own name: the device code built for the emulator spells it as nvcc's",
}

# A namespace spelled through a macro (kernels/cuda/ns.h: gantry::GANTRY_CUDA_NS is gantry::cuda,
# or gantry::cuda_emulated in the emulated build) is invisible to a reader grepping its name:
# such a file says the names in its first line.
NS_MACRO = re.compile(r"namespace\s+gantry::GANTRY_CUDA_NS\b")
NS_MACRO_FIRST_LINE = ("gantry::cuda", "gantry::cuda_emulated", "GANTRY_CUDA_NS")
# Files that lack the line for now: each is a line to delete when it gets one.
NS_MACRO_PENDING = {}  # files that may still lack the line (none)

# Folder = namespace (docs/architecture.md, "Libraries and what they may use"): a source file
# defines things only in its folder's namespace, `gantry::<folder's name>` (worker/train/ is
# gantry::train), or in one NAMESPACES lists for its folder (the most specific entry, which
# replaces that default) or FILE_NAMESPACES for the file itself, each with why. A nested
# namespace is one of these too: a new one is a decision written here. Not checked: tests/ and
# bench/ (no library), an .inc (a fragment its includer puts in its own namespace). What a file
# only declares in another namespace (`namespace gloo { class Context; }`, a function another
# library defines) is a forward declaration, not the file's namespace; an anonymous namespace
# is its enclosing one's. "::" is the global namespace. Each namespace named here is named in
# docs/architecture.md's section too (NAMESPACE_DOC), so that the list and the docs agree.
NAMESPACES = {
    "checkpoint/gpt/": (["gantry::checkpoint"], "a backend in a subfolder shares its folder's namespace: a library of "
                                                 "its own because it needs the model, which the format does not"),
    "checkpoint/remote/": (["gantry::checkpoint"], "a backend in a subfolder: its own library, it needs the shard client"),
    "comm/gloo/": (["gantry::comm"], "a backend in a subfolder: its own library, so a binary links only its backends"),
    "comm/nccl/": (["gantry::comm"], "a backend in a subfolder: its own library (a CPU build has no NCCL)"),
    "shardserver/client/": (["gantry::shardserver"], "a backend in a subfolder: its own library, the coordinator and "
                                                     "the worker link it without the server"),
    "cli/train/": (["gantry::calibrate"], "gantry-train's own files, no library's: calibrate's GEMM and all-reduce "
                                          "sweeps"),
    "common/": (["gantry", "gantry::metrics", "gantry::rocks", "gantry::net"],
                "seven libraries: the vocabulary every layer speaks is plain gantry::; three subsystems whose names "
                "would crowd it keep a namespace each (metrics, the RocksDB wrapper, the data plane's streams)"),
    "coordinator/": (["gantry::coordinator", "gantry::coordinator::placement", "gantry::coordinator::quota",
                      "gantry::coordinator::preemption"],
                     "the scheduler's rules, functions of the state they read (no locks, no I/O), each nested "
                     "under its own name: placement.h, quota.h, preemption.h"),
    "kernels/cpu/": (["gantry::kernels", "gantry::kernels::elem", "gantry::kernels::vec"],
                     "the cpu backend is gantry::kernels; its element access (elem.h: Elem<P>) and vectorisable "
                     "exp/tanh (vec_math.h) are nested so that their short names stay out of the interface's"),
    "kernels/cuda/": (["gantry::GANTRY_CUDA_NS", "gantry::GANTRY_CUDA_NS::flash"],
                      "compiled twice, by nvcc (gantry::cuda) and against the emulator (gantry::cuda_emulated), so "
                      "one binary holds both; flash_attention.cuh's kernels nested in ::flash, one translation "
                      "unit's each"),
    "kernels/emulated/": (["gantry::emu", "gantry::emucuda", "gantry::emucudnn",
                           "gantry::emucudnn::cudnn_frontend", "gantry::emucudnn::cudnn_frontend::detail",
                           "gantry::emucudnn::cudnn_frontend::graph"],
                          "the emulator stands in for three vendors' APIs under their own names: emu the execution "
                          "model, emucuda the CUDA runtime and cuBLAS(Lt), emucudnn cuDNN, with the frontend's "
                          "nested namespaces as cudnn_frontend spells them"),
    "worker/": ([], "no library and no namespace: gantry-worker's main.cc, and four libraries in subfolders"),
}
FILE_NAMESPACES = {
    "common/rpc_edge.h": (["gantry::edge_internal"], "the interceptor's template helper, out of gantry::'s names"),
    "common/daemon.cc": (["::"], "gflags' DEFINE_bool(list_kill_points), every daemon's flag, is global"),
    "common/metrics.cc": (["::"], "pthread_attr_setstacksize, interposed over glibc's, is the C symbol's name"),
    "kernels/cuda/cudnn_attention.cc": (["cudnn_frontend"], "the frontend's dynamic loading looks up its "
                                                            "cudnn_dlhandle in its own namespace"),
    "kernels/emulated/device.h": (["gantry"], "CUDA's device-side names (dim3, float2 ...) in gantry, where the "
                                              "device code looks them up"),
}
# A binary's main.cc is no library's: main() and its gflags are global, its helpers may be in gantry.
MAIN_NAMESPACES = ["::", "gantry"]
NAMESPACE_DOC = ("docs/architecture.md", "## Libraries and what they may use")
NAMESPACE_CHECKED = (".h", ".cc", ".cu", ".cuh")
# Comments, strings, character literals and numbers (their digit separators), then directives.
LEXED = re.compile(r"""//[^\n]*|/\*.*?\*/|R"([^(\s]*)\(.*?\)\1"|"(?:\\.|[^"\\\n])*"|\b\d[\w']*|"""
                   r"""'(?:\\.|[^'\\\n])+'""", re.S)
DIRECTIVE = re.compile(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", re.M)
NS_TOKEN = re.compile(r"\b(?:inline\s+)?namespace\s+([A-Za-z_][\w:]*\s*)?\{|\{|\}")


def code_of(text, directives=True):
    """text with its comments, strings and characters blanked (lines kept), and its preprocessor
    directives too unless directives is False."""
    code = LEXED.sub(lambda m: "0" if m.group(0)[0].isdigit() else re.sub(r"[^\n]", " ", m.group(0)), text)
    return DIRECTIVE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), code) if directives else code


def namespaces_defined(text):
    """{namespace: first line} for each namespace in which text defines something ("::" the global
    one), or None and why when its braces do not pair."""
    code = code_of(text)
    stack, pos, own = [], 0, {}  # stack: ("ns"|"block", namespace, where its own text resumes)

    def ns():
        return next((q for k, q, _ in reversed(stack) if k == "ns"), "::")

    def keep(q, piece, at):
        if piece.strip() and ("{" in piece or "=" in piece):  # else declarations alone: forward ones
            line = code.count("\n", 0, at + len(piece) - len(piece.lstrip())) + 1
            own.setdefault(q, line)

    for m in NS_TOKEN.finditer(code):
        in_block = any(k == "block" for k, _, _ in stack)
        tok = m.group(0)
        if tok == "}":
            if not stack:
                return None, f"line {code.count(chr(10), 0, m.start()) + 1}: a }} closes nothing"
            k, q, start = stack.pop()
            if k == "ns":
                keep(q, code[pos:m.start()], pos)
                pos = m.end()
            elif not any(kk == "block" for kk, _, _ in stack):
                keep(q, code[start:m.end()], start)
                pos = m.end()
        elif in_block:
            stack.append(("block", "", 0))
        elif tok == "{":
            keep(ns(), code[pos:m.start()], pos)
            stack.append(("block", ns(), m.start()))
        else:
            keep(ns(), code[pos:m.start()], pos)
            name, q = (m.group(1) or "").strip(), ns()
            stack.append(("ns", name if q == "::" else f"{q}::{name}" if name else q, m.end()))
            pos = m.end()
    if stack:
        return None, "a { is not closed"
    keep(ns(), code[pos:], pos)
    return own, None


def namespaces_allowed(rel):
    folder = os.path.dirname(rel) + "/"
    entry = max((d for d in NAMESPACES if folder == d), key=len, default=None)
    allowed = list(NAMESPACES[entry][0]) if entry else ["gantry::" + os.path.basename(folder[:-1])]
    allowed += FILE_NAMESPACES.get(rel, ([], ""))[0]
    if os.path.basename(rel) == "main.cc":
        allowed += MAIN_NAMESPACES
    return allowed


def namespace_breaches(texts):
    out = []
    for rel, text in texts.items():
        if rel.startswith(("tests/", "bench/")) or not rel.endswith(NAMESPACE_CHECKED):
            continue
        own, why = namespaces_defined(text)
        if own is None:
            out.append(f"{rel}: its namespaces cannot be followed ({why})")
            continue
        allowed = namespaces_allowed(rel)
        for q, line in sorted(own.items(), key=lambda x: x[1]):
            if q not in allowed:
                out.append(f"{rel}:{line} defines in namespace {q} (its folder's are {', '.join(allowed) or 'none'}: "
                           f"move it, or list the namespace and why in NAMESPACES or FILE_NAMESPACES of "
                           f"scripts/check_deps.py and in {NAMESPACE_DOC[0]})")
    for rel in FILE_NAMESPACES:
        if rel not in texts:
            out.append(f"{rel}: listed in FILE_NAMESPACES but not in the tree: remove it from scripts/check_deps.py")
    doc = texts.get(NAMESPACE_DOC[0], "")
    section = doc[doc.find(NAMESPACE_DOC[1]):]
    section = section[:section.find("\n## ", 1)] if "\n## " in section[1:] else section
    named = set()
    for names, _ in list(NAMESPACES.values()) + list(FILE_NAMESPACES.values()):
        named |= set(names)
    for q in sorted(named):
        said = ("global namespace" in section if q == "::" else
                re.search(r"(?<![\w:])%s(?!\w|::\w)" % re.escape(q), section) is not None)
        if not said:
            out.append(f"{NAMESPACE_DOC[0]} (\"{NAMESPACE_DOC[1][3:]}\") does not name {q}, which check_deps' "
                       f"namespace rule allows: say there where it is used and why")
    return out


# One way to check a GPU library's result: GPU_RETURN_IF_ERROR (common/gpu_check.h), with
# GpuOk(r) where no error is built. A line that checks a result by hand in one of three forms is
# a breach, but for these files, each with how many such lines it holds and why (a file that
# gets more, or fewer, is a breach too: the count is written here):
#   - compared with a success value: `!= cudaSuccess`, `ncclSuccess ==`, `case CUDA_SUCCESS:`,
#     cuDNN's frontend's `.is_good()` / `.is_bad()`;
#   - an error's words taken by hand: a library's error-text call (cudaGetErrorString,
#     ncclGetErrorString, cublasGetStatusName, nvmlErrorString ..., the frontend's
#     `.get_message()`) or GpuErrorText outside its overloads: what the macro writes;
#   - GpuOk deciding a statement that builds a Status: `if (!GpuOk(x)) return
#     absl::InternalError(...)`, with or without braces, or `GpuOk(x) ? ... : absl::...Error(...)`.
# Comments and strings are not read; macros are (a hand-written CHECK macro is a hand check).
# tests/ is not checked: a test compares results with gtest, whose failure prints the call and
# both values.
GPU_SUCCESS = r"(?:ncclSuccess|cudaSuccess|CUBLAS_STATUS_SUCCESS|CUDNN_STATUS_SUCCESS|NVML_SUCCESS|CUDA_SUCCESS)"
HAND_COMPARE = re.compile(r"[!=]=\s*(?:\w+::)*%s\b|\b%s\s*[!=]=|\bcase\s+(?:\w+::)*%s\b|\.is_(?:good|bad)\s*\(\s*\)"
                          % (GPU_SUCCESS, GPU_SUCCESS, GPU_SUCCESS))
HAND_WORDS = re.compile(r"\b(?:cudaGetErrorString|cudaGetErrorName|cublasGetStatusString|cublasGetStatusName|"
                        r"cudnnGetErrorString|ncclGetErrorString|cuGetErrorString|cuGetErrorName|nvmlErrorString)\s*\(|"
                        r"\.(?:ErrorString|get_message)\s*\(|(?<!string )\bGpuErrorText\s*\(")
HAND_GPUOK = re.compile(r"(?<!bool )\bGpuOk\s*\(")
# A file with none of these words has no hand check (most files: the test above is then skipped).
HAND_ANY = re.compile(r"Success|SUCCESS|is_good|is_bad|GetError|GetStatus|ErrorString|get_message|GpuErrorText|GpuOk")
BUILDS_STATUS = re.compile(r"\babsl::(?:\w+Error|Status)\s*\(|\bGpuCallError\s*\(|\bStatus\s*\(\s*absl::StatusCode")
HAND_CHECKS = {
    "common/gpu_check.h": (4, "the macro itself, in its two forms: GpuOk deciding, GpuErrorText's words into "
                              "GpuCallError's Status"),
    "kernels/cuda/check.h": (4, "GpuOk and GpuErrorText for cudaError_t and cublasStatus_t: what the macro asks"),
    "kernels/cuda/cudnn_attention.cc": (3, "GpuOk and GpuErrorText for the frontend's error_t and cudnnStatus_t "
                                           "(the one file that includes cuDNN)"),
    "kernels/cuda/backend.cc": (2, "Check keeps the first error of an op, which returns void (the backend reports "
                                   "it later), where the macro would return; NewBackend: a failed device count is "
                                   "no device visible (DeviceCount's probe), the error names the device asked for"),
    "comm/nccl/nccl_communicator.cc": (3, "GpuOk and GpuErrorText for ncclResult_t (the one file that includes "
                                          "NCCL)"),
    "kernels/emulated/cuda_api.cc": (6, "the emulator's CUDA runtime and cuBLAS define the words "
                                        "(cudaGetErrorString ...), by `case cudaSuccess:`"),
    "kernels/emulated/cuda_api.h": (3, "the emulator's declarations of cudaGetErrorName, cudaGetErrorString, "
                                       "cublasGetStatusName"),
    "worker/gpu_metrics/nvml.cc": (12, "NVML is loaded at run time (dlopen): its result is an int here, which "
                                       "a GpuOk overload must not take, its words come from the loaded library "
                                       "(api.ErrorString), and a failure unloads it first; the cudaError_t "
                                       "overloads are in kernels/cuda/check.h, below this folder's floor"),
    "worker/train/device.cc": (1, "a probe: the GPU's name and memory where its properties can be read, "
                                  "else unknown; no error is built"),
}
HAND_CHECKED = (".h", ".cc", ".cu", ".cuh", ".inc")


def statement_after(code, at):
    """The rest of the statement around code[at]: to its `;`, or through the braces of a block it
    opens first (an `if`'s), with an `else` branch that follows."""
    depth, i = 0, at
    while i < len(code):
        c = code[i]
        if c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        elif c == ";" and depth <= 0:
            end = i + 1
            break
        elif c == "{" and depth <= 0:
            n = 0
            for j in range(i, len(code)):
                n += {"{": 1, "}": -1}.get(code[j], 0)
                if n == 0:
                    break
            end = j + 1
            break
        i += 1
    else:
        end = len(code)
    rest = re.match(r"\s*else\b", code[end:])
    return code[at:end] + (statement_after(code, end + rest.end()) if rest else "")


def hand_check_lines(text):
    """The lines of text that check a GPU result by hand (HAND_CHECKS' three forms)."""
    if not HAND_ANY.search(text):
        return []
    code = code_of(text, directives=False)
    at = {m.start() for rx in (HAND_COMPARE, HAND_WORDS) for m in rx.finditer(code)}
    at |= {m.start() for m in HAND_GPUOK.finditer(code) if BUILDS_STATUS.search(statement_after(code, m.end()))}
    return sorted({code.count("\n", 0, i) + 1 for i in at})


def hand_check_breaches(texts):
    out = []
    for rel, text in texts.items():
        if rel.startswith("tests/") or not rel.endswith(HAND_CHECKED):
            continue
        lines = hand_check_lines(text)
        allowed, why = HAND_CHECKS.get(rel, (0, ""))
        if len(lines) > allowed:
            out.append(f"{rel}:{','.join(map(str, lines))}: {len(lines)} result{'s' if len(lines) > 1 else ''} "
                       f"compared by hand (with a success value, its words taken, or a Status built on GpuOk)" +
                       (f" ({allowed} listed: {why})" if allowed else "") +
                       ": check it with GPU_RETURN_IF_ERROR (common/gpu_check.h; a second argument makes the "
                       "Status), or ask with GpuOk where no error is built")
        elif len(lines) < allowed:
            out.append(f"{rel}: {len(lines)} result{'s' if len(lines) != 1 else ''} compared by hand, "
                       f"HAND_CHECKS lists {allowed}: lower its count in scripts/check_deps.py")
    for rel in HAND_CHECKS:
        if rel not in texts:
            out.append(f"{rel}: listed in HAND_CHECKS but not in the tree: remove it from scripts/check_deps.py")
    return out


# Tests mirror the sources (docs/testing.md): each folder under tests/ that holds files is the
# twin of a source folder (tests/worker/train/ of worker/train/), so that a library's tests are
# found beside its path; these hold the tests of the tree as a whole, each with why (their
# subfolders too).
TEST_FOLDERS_OF_THE_WHOLE = {
    "tests/fuzz/": "libFuzzer targets, each of a parser of bytes Gantry does not control, with their corpora",
    "tests/gpu/": "the suite for a GPU host (tests/gpu/run.sh, check.sh): CUDA kernels, training and NCCL",
    "tests/integration/": "the daemons driven as processes: a cluster on loopback, chaos, docker",
    "tests/load/": "the control plane under load (coordinator and shard servers together)",
    "tests/reference/": "the PyTorch fixtures and the scripts that make them, read by tests of several folders",
    "tests/sanitizers/": "the sanitizers' suppressions, one file per sanitizer",
}
SOURCE_EXT = (".h", ".cc", ".cu", ".cuh", ".inc", ".proto")


def test_folder_breaches(paths):
    sources = {os.path.dirname(r) + "/" for r in paths if r.endswith(SOURCE_EXT) and not r.startswith("tests/")}
    sources |= {d[:i + 1] for d in sources for i in range(len(d)) if d[i] == "/"}  # and their parents
    out, seen = [], set()
    for rel in paths:
        folder = os.path.dirname(rel) + "/"
        if not folder.startswith("tests/") or folder == "tests/" or folder in seen:
            continue
        seen.add(folder)
        if any(folder.startswith(d) for d in TEST_FOLDERS_OF_THE_WHOLE):
            continue
        if folder[len("tests/"):] not in sources:
            out.append(f"{folder} names no source folder ({folder[len('tests/'):]} holds no source): tests mirror "
                       f"the sources, so put a library's tests in its twin, or list a folder of the whole tree's "
                       f"tests, and why, in TEST_FOLDERS_OF_THE_WHOLE (scripts/check_deps.py)")
    for d in TEST_FOLDERS_OF_THE_WHOLE:
        if not any(r.startswith(d) for r in paths):
            out.append(f"{d}: listed in TEST_FOLDERS_OF_THE_WHOLE but holds no file: remove it from scripts/check_deps.py")
    return out


# A backend's bool answers go through Supports; ops return void, memory calls pointers.
CAPABILITY_FILES = ("kernels/backend.h", "kernels/cpu/backend.cc", "kernels/cuda/backend.cc")
CAPABILITY_FLAG = re.compile(r"(?:\bvirtual\s+bool\s+(\w+)\s*\(|\bbool\s+(\w+)\s*\([^;{]*\)\s*const\s+override\b)")


def capability_breaches(texts):
    out = []
    for rel in CAPABILITY_FILES:
        text = texts.get(rel, "")
        for m in CAPABILITY_FLAG.finditer(text):
            name = m.group(1) or m.group(2)
            if name == "Supports" or "//" in text[text.rfind("\n", 0, m.start()) + 1:m.start()]:
                continue
            line = text.count("\n", 0, m.start()) + 1
            out.append(f"{rel}:{line} declares a capability flag `{name}`: add a kernels::Capability and answer it "
                       f"in Backend::Supports (kernels/backend.h)")
    return out


# The decision record's count of the backend's virtuals (docs/decisions.md, "The backend's
# capabilities in one query") is the header's: a figure that says "today" and went stale
# misleads whoever weighs a new op. Counted as the record's command does (`grep -c ") = 0;\|)
# const = 0;"`, `grep -c "^ *virtual "`), on the header's code without its comments.
BACKEND_COUNT = ("kernels/backend.h", "docs/decisions.md",
                 re.compile(r"(\d+) pure virtuals \((\d+) virtuals\) today"))


def backend_count_breaches(texts):
    header, record, said = BACKEND_COUNT
    code = code_of(texts.get(header, ""), directives=False).split("\n")
    pure = sum(1 for l in code if ") = 0;" in l or ") const = 0;" in l)
    virtual = sum(1 for l in code if re.match(r" *virtual ", l))
    found = said.findall(texts.get(record, ""))
    if not found:
        return [f"{record} says nowhere \"N pure virtuals (M virtuals) today\" of {header}: the capability entry "
                f"records the count ({pure} pure virtuals, {virtual} virtuals)"]
    return [f"{record} says \"{p} pure virtuals ({v} virtuals) today\", but {header} has {pure} pure virtuals "
            f"and {virtual} virtuals: write today's count and what changed it there"
            for p, v in found if (int(p), int(v)) != (pure, virtual)]


def literal_hints(rx):
    """Strings one of which every match of rx contains (the longest literal run of each of its
    top-level alternatives), or None where an alternative has none of 3 characters or more: a
    text without any of them is not scanned (str.find is a hundred times faster than a pattern
    that begins with a lookbehind)."""
    try:
        from re import _parser as parser, _constants as consts
    except ImportError:  # before Python 3.11
        import sre_parse as parser, sre_constants as consts
    items = list(parser.parse(rx.pattern, rx.flags))
    branches = [list(b) for b in items[0][1][1]] if len(items) == 1 and items[0][0] == consts.BRANCH else [items]
    hints = []
    for branch in branches:
        best, run = "", ""
        for op, arg in branch + [(None, None)]:
            if op == consts.LITERAL and not rx.flags & re.IGNORECASE:
                run += chr(arg)
            else:
                best, run = max(best, run, key=len), ""
        if len(best) < 3:
            return None
        hints.append(best)
    return hints


def declared_names(path):
    with open(path, encoding="utf-8") as f:
        return {next(g for g in m.groups() if g) for m in DECLARED.finditer(f.read())}


def tracked_files(src):
    """The tree's files: git's (tracked, or new and not ignored) where src is a checkout, else a
    walk past build folders."""
    out = subprocess.run(["git", "-C", src, "ls-files", "--cached", "--others", "--exclude-standard"],
                         capture_output=True, text=True)
    if out.returncode == 0:
        rels = out.stdout.splitlines()
    else:
        rels = []
        for root, dirs, names in os.walk(src):
            dirs[:] = [d for d in dirs if not d.startswith(("build", ".", "venv", "__pycache__"))]
            rels += [os.path.relpath(os.path.join(root, n), src) for n in names]
    return sorted(r for r in rels if os.path.isfile(os.path.join(src, r)))


def tracked_text_files(src):
    """The tree's text files (TEXT_EXT) of tracked_files."""
    return [r for r in tracked_files(src) if r.endswith(TEXT_EXT)]


def text_breaches(src, injected):
    rules = [(re.compile(p), why) for p, why in RETIRED]
    for old, (home, headers) in MOVED_OUT.items():
        kept = set()
        for root, _, names in os.walk(os.path.join(src, home)):
            kept |= set().union(*[declared_names(os.path.join(root, n)) for n in names if n.endswith(".h")])
        for h in headers:
            moved = sorted(declared_names(os.path.join(src, h)) - kept)
            if moved:
                ns = open(os.path.join(src, h), encoding="utf-8").read()
                now = re.search(r"namespace\s+gantry::(\w+)", ns)
                rules.append((re.compile(r"(?<![\w:])%s::(?:%s)\b" % (old, "|".join(moved))),
                              f"{old}:: no longer holds it: {now.group(1) if now else '?'}:: ({h})"))
    out = []
    tracked = tracked_text_files(src)
    files = tracked + sorted(set(injected) - set(tracked))
    texts = {}
    for rel in files:
        path = os.path.join(src, rel)
        text = open(path, encoding="utf-8", errors="replace").read() if os.path.isfile(path) else ""
        texts[rel] = text + "".join("\n" + t for t in injected.get(rel, []))
    ours = set()  # this project's namespaces: gantry's own, and the wire contract's
    for rel, text in texts.items():
        if rel.endswith((".h", ".cc", ".cu", ".cuh")):
            ours |= set(re.findall(r"namespace\s+gantry::(\w+)", text))
    ours.add("v1")
    for rel, text in texts.items():
        if rel in ALIAS_EXEMPT or not rel.endswith((".h", ".cuh")):
            continue
        for m in ALIAS.finditer(text):
            if m.group(2) in ours:
                line = text.count("\n", 0, m.start()) + 1
                out.append(f"{rel}:{line} says `{m.group(0).strip()}` (an alias keeps a name alive in a second "
                           f"namespace: write {m.group(2)}:: where it is used)")
    out += namespace_breaches(texts)
    out += hand_check_breaches(texts)
    out += capability_breaches(texts)
    out += backend_count_breaches(texts)
    out += test_folder_breaches(sorted(set(tracked_files(src)) | set(texts)))
    for rel, text in texts.items():
        if rel in NS_MACRO_PENDING or not rel.endswith((".h", ".cc", ".cu", ".cuh", ".inc")) or not NS_MACRO.search(text):
            continue
        first = text.split("\n", 1)[0]
        if not all(n in first for n in NS_MACRO_FIRST_LINE):
            out.append(f"{rel}:1 does not say how its namespace is named (gantry::GANTRY_CUDA_NS): begin it with "
                       f"`// namespace gantry::cuda (gantry::cuda_emulated in the cuda-emulated build): "
                       f"GANTRY_CUDA_NS, kernels/cuda/ns.h`")
    hints = {rx: literal_hints(rx) for rx, _ in rules}
    for rel, text in texts.items():
        if rel in RETIRED_EXEMPT:
            continue
        for rx, why in rules:
            if hints[rx] and not any(h in text for h in hints[rx]):
                continue
            for m in rx.finditer(text):
                line = text.count("\n", 0, m.start()) + 1
                out.append(f"{rel}:{line} says `{' '.join(m.group(0).split())}` ({why})")
    return out


def folder_of(rel):
    """The most specific ALLOWED entry holding file rel (relative to the source root)."""
    best = None
    for d in ALLOWED:
        if rel.startswith(d) and (best is None or len(d) > len(best)):
            best = d
    return best


def breaches_of(rel, headers):
    d = folder_of(rel)
    out = []
    for h in headers:
        if h.startswith(d):
            continue
        if any(h.startswith(p) for p in PROJECT) and not any(h.startswith(a) for a in ALLOWED[d]):
            out.append(f"{rel} includes {h} ({d} must not use it: it may use {', '.join(ALLOWED[d])})")
        for f in FORBIDDEN_EXTERNAL.get(d, []):
            if h.startswith(f):
                out.append(f"{rel} includes {h} ({d} must not use {f})")
    return out


INCLUDE = re.compile(r'^\s*#\s*include\s+[<"]([^">]+)[">]', re.M)


def link_command(build, binary):
    out = subprocess.run(["ninja", "-C", build, "-t", "commands", binary], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"check_deps: ninja knows no target {binary} in {build}: {out.stderr.strip()}")
    lines = [l for l in out.stdout.splitlines() if f"-o {binary}" in l]
    if not lines:
        sys.exit(f"check_deps: no link command for {binary}")
    return lines[-1]


def link_graph(build, injected):
    """BUILD/link_graph.txt as {target: [what it links]}, with the injected edges."""
    path = os.path.join(build, "link_graph.txt")
    if not os.path.isfile(path):
        sys.exit(f"check_deps: no {path}: configure the build with this tree's CMakeLists.txt (it writes the file)")
    graph = {}
    for line in open(path, encoding="utf-8"):
        name, _, deps = line.rstrip("\n").partition(": ")
        out = graph.setdefault(name, [])
        for d in deps.split():
            d = re.sub(r"^\$<LINK_ONLY:(.*)>$", r"\1", d)
            if d not in out:
                out.append(d)
    for lib, deps in injected.items():
        graph.setdefault(lib, []).extend(deps)
    return graph


def graph_breaches(graph):
    """For each LIBRARY_RULES library, the shortest path to each forbidden library it reaches first."""
    out = []
    for lib, forbidden in LIBRARY_RULES.items():
        if lib not in graph:
            out.append(f"{lib}: not in the link graph (LIBRARY_RULES names a library the build lacks)")
            continue
        seen, queue = {lib: None}, [lib]
        while queue:
            node = queue.pop(0)
            for d in graph.get(node, []):
                if d in seen:
                    continue
                seen[d] = node
                hit = next((f for f in forbidden if d == f or (d.startswith(f) if f.endswith("::") else
                                                                os.path.basename(d).startswith(f))), None)
                if hit:
                    path, n = [], d
                    while n is not None:
                        path.append(os.path.basename(n) if "/" in n else n)
                        n = seen[n]
                    out.append(f"{lib} links {d} through {' -> '.join(reversed(path))} (it must not reach {hit})")
                else:
                    queue.append(d)  # past a forbidden library, what it brings is its own breach
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", help="a configured Ninja build folder; without it the links are not checked")
    ap.add_argument("--source", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--inject-link", action="append", default=[])
    ap.add_argument("--inject-include", action="append", default=[])
    ap.add_argument("--inject-text", action="append", default=[])
    a = ap.parse_args()
    breaches = []

    injected_links, injected_edges = {}, {}
    for spec in a.inject_link:
        binary, lib = spec.split("=", 1)
        (injected_links if "/" in binary else injected_edges).setdefault(binary, []).append(lib)
    for binary, forbidden in (LINK_RULES if a.build else {}).items():
        cmd = link_command(a.build, binary).split() + injected_links.get(binary, [])
        for word in cmd:
            base = os.path.basename(word)
            for f in forbidden:
                if base.startswith(f):
                    breaches.append(f"{binary} links {word} (it must not link {f})")
    if a.build:
        breaches += graph_breaches(link_graph(a.build, injected_edges))

    injected_includes = {}
    for spec in a.inject_include:
        path, header = spec.split("=", 1)
        injected_includes.setdefault(path, []).append(header)
    src = os.path.abspath(a.source)
    files = 0
    for d in ALLOWED:
        top = os.path.join(src, d)
        walk = os.walk(top) if not os.path.isfile(top) else [(os.path.dirname(top), [], [os.path.basename(top)])]
        for root, _, names in walk:
            for n in sorted(names):
                if not n.endswith((".h", ".cc", ".cu", ".cuh", ".inc")):
                    continue
                path = os.path.join(root, n)
                rel = os.path.relpath(path, src)
                if folder_of(rel) != d:
                    continue  # a deeper entry checks it
                with open(path, encoding="utf-8") as f:
                    headers = INCLUDE.findall(f.read()) + injected_includes.get(rel, [])
                files += 1
                breaches.extend(breaches_of(rel, headers))

    if breaches:
        print("check_deps: %d forbidden dependenc%s:" % (len(breaches), "y" if len(breaches) == 1 else "ies"))
        for b in breaches:
            print("  " + b)

    injected_text = {}
    for spec in a.inject_text:
        path, text = spec.split("=", 1)
        injected_text.setdefault(path, []).append(text)
    retired = text_breaches(src, injected_text)
    if retired:
        print("check_deps: %d name%s or check%s to fix (a retired name, an alias, a namespace not said or not the "
              "folder's, a hand check, a capability flag or count, a test folder):"
              % (len(retired), *(("", "") if len(retired) == 1 else ("s", "s"))))
        for b in retired:
            print("  " + b)
    if breaches or retired:
        return 1
    links = (f"{len(LINK_RULES)} binaries' links, {len(LIBRARY_RULES)} libraries' link graphs" if a.build
             else "(links not checked: no --build)")
    print(f"check_deps: {links} and {files} files' includes keep the library rules; "
          f"no file names a retired folder, library or namespace, no header keeps an alias, each "
          f"GANTRY_CUDA_NS file names its namespace, each source file defines in its folder's namespace "
          f"or a listed one, and GPU results are checked by GPU_RETURN_IF_ERROR "
          f"(by hand only where HAND_CHECKS says why), a backend's capabilities are asked only through Supports (as many virtuals as the record says), "
          f"and every test folder is a source folder's twin or listed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
