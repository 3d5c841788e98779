#!/usr/bin/env bash
# The CPU image (deploy/docker/Dockerfile) without a container engine (none runs on the CI
# machines): the binaries its build stage copies are the ones the build makes; every package
# its runtime stage installs exists in Debian bookworm; and every shared library those
# binaries load comes from a listed package, from a package those depend on, or from the
# required packages of bookworm-slim. The check can fail: with librocksdb7.8 dropped from the
# list, the coordinator's RocksDB library is reported missing.
# The GPU worker image is built on NVIDIA's Ubuntu 24.04 images, whose package names this
# Debian machine cannot check; that part is said and not passed. The build context (.dockerignore)
# leaves out every path .gitignore names.
# Usage: docker_test.sh BUILD_DIR
set -uo pipefail
BUILD="$(cd "$1" && pwd)"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
TMP="$(mktemp -d)"; trap 'rm -rf "$TMP"' EXIT
DOCKERFILE="$ROOT/deploy/docker/Dockerfile"
for tool in apt-cache dpkg-query ldd; do
  command -v "$tool" >/dev/null || { echo "SKIP: $tool is not installed (a Debian machine has it)"; exit 77; }
done
fail=0; passed=0
check() { local n="$1"; shift; if "$@"; then echo "ok   $n"; passed=$((passed + 1)); else echo "FAIL $n"; fail=$((fail + 1)); fi; }

# The build stage's `cp build/X ... /out/` sources and the runtime stage's apt-get list (its
# RUN lines joined, the words between `apt-get install` and the next `&&`, flags dropped).
sed -n '/mkdir -p \/out/,/\/out\//p' "$DOCKERFILE" | grep -o 'build/[^ ]*' >"$TMP/binaries"
awk '/^FROM/ {n++} n == last' last="$(grep -c '^FROM' "$DOCKERFILE")" "$DOCKERFILE" | sed -e ':a' -e '/\\$/N; s/\\\n//; ta' |
  grep -o 'apt-get install[^&]*' | tr ' ' '\n' | grep -E '^[a-z0-9][a-z0-9.+-]+$' | grep -vxE 'apt-get|install' >"$TMP/packages"
check "the build stage copies $(wc -l <"$TMP/binaries") binaries, each one the build makes" bash -c \
  "[ \$(wc -l <'$TMP/binaries') -eq 5 ] && while read -r b; do [ -x '$BUILD/'\"\${b#build/}\" ] || { echo \"     \$b is not built\"; exit 1; }; done <'$TMP/binaries'"
check "each of the $(wc -l <"$TMP/packages") runtime packages is in Debian bookworm" bash -c \
  "while read -r p; do apt-cache show --no-all-versions \"\$p\" >/dev/null 2>&1 || { echo \"     no package \$p\"; exit 1; }; done <'$TMP/packages'"

# The build context: every path .gitignore names (a local build directory above all) is left
# out by .dockerignore.
context_clean() {
  local bad=0 pattern
  while read -r pattern; do
    pattern="${pattern#/}"; pattern="${pattern%/}"
    case "$pattern" in *__pycache__*) pattern="**/__pycache__" ;; '*.pyc') pattern="**/*.pyc" ;; esac
    grep -qxF "$pattern" "$ROOT/.dockerignore" || { echo "     .dockerignore does not leave out $pattern"; bad=1; }
  done < <(grep -vE '^(#|$)' "$ROOT/.gitignore")
  return $bad
}
check "the build context leaves out what .gitignore names (build directories, venvs, prepared datasets)" context_clean
# ...and keeps every file the repository tracks (a pattern that matched a source folder, as
# `data` once did, would build an image from a tree that lacks it).
context_whole() {
  git -C "$ROOT" rev-parse --git-dir >/dev/null 2>&1 || { echo "     not a git checkout: nothing to compare"; return 0; }
  local bad=0 pattern hit
  while read -r pattern; do
    case "$pattern" in .git|'**/'*) continue ;; esac
    hit="$(cd "$ROOT" && git ls-files | grep -E "^${pattern//\*/[^/]*}(/|$)" | head -1)"
    [ -z "$hit" ] || { echo "     .dockerignore's $pattern leaves out the tracked $hit"; bad=1; }
  done < <(grep -vE '^(#|$)' "$ROOT/.dockerignore")
  return $bad
}
check "the build context keeps every file the repository tracks" context_whole

closure() {  # closure PACKAGES...: them and everything they depend on (pre-depends included)
  apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces --no-enhances \
    "$@" 2>/dev/null | grep -v '^ ' | sed 's/:amd64$//' | sort -u
}
# bookworm-slim: the required packages (and what they need).
mapfile -t required < <(dpkg-query -W -f='${Package} ${Priority}\n' | awk '$2 == "required" {print $1}')
closure "${required[@]}" >"$TMP/base"
owner() {  # owner LIBRARY_PATH: the package that ships it (usrmerge: /lib is /usr/lib)
  local f="$1" p
  for cand in "$f" "$(readlink -f "$f")" "/usr${f}" "${f#/usr}"; do
    p=$(dpkg -S "$cand" 2>/dev/null | head -1 | cut -d: -f1) && [ -n "$p" ] && { echo "$p"; return; }
  done
  echo "?"
}
# What the binaries load: "binary library path package", each library's owner looked up once.
while read -r b; do
  ldd "$BUILD/${b#build/}" | awk -v b="${b##*/}" '$2 == "=>" && $3 ~ /^\// {print b, $1, $3}'
done <"$TMP/binaries" | grep -vE ' (libcuda|libcudart|libcublas|libcublasLt|libnccl)\.so|/usr/local/cuda' >"$TMP/loads"
# (CUDA's libraries: this build found nvcc; the image's build stage has none and builds for CPU.)
awk '{print $3}' "$TMP/loads" | sort -u | while read -r path; do echo "$path $(owner "$path")"; done >"$TMP/owners"
libs_covered() {  # libs_covered PACKAGES_FILE: every library the binaries load is provided
  { closure $(cat "$1"); cat "$TMP/base"; } | sort -u >"$TMP/have"
  awk 'FNR == NR {have[$1] = 1; next} FILENAME ~ /owners$/ {pkg[$1] = $2; next}
       !(pkg[$3] in have) {print "     " $1 ": " $2 " (" $3 ", package " pkg[$3] ") is not in the image"; bad = 1}
       END {exit bad}' "$TMP/have" "$TMP/owners" "$TMP/loads"
}
check "every shared library of the 5 binaries ($(wc -l <"$TMP/owners") in all) comes with the runtime stage's packages or bookworm-slim" \
  libs_covered "$TMP/packages"
grep -vx 'librocksdb7.8' "$TMP/packages" >"$TMP/without-rocksdb"
check "(the check can fail: without librocksdb7.8 the RocksDB library is missing)" bash -c \
  "$(declare -f libs_covered closure); TMP='$TMP'; libs_covered '$TMP/without-rocksdb' | grep -q 'librocksdb.so'"
echo "not checked: deploy/docker/Dockerfile.worker-cuda (NVIDIA's Ubuntu 24.04 images; its package names are Ubuntu's)"
echo "$passed passed, $fail failed"
[ "$fail" -eq 0 ]
