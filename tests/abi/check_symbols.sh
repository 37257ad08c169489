#!/usr/bin/env bash
# Checks the dynamic symbol table of a built libnccl.so.2:
#  - every function declared in include/nccl.h is exported, with its pnccl alias;
#  - every NCCL symbol PyTorch 2.11 links (torch-2.11-links.txt) is exported;
#  - nothing else is exported except Ferry's documented ncclFerry* extensions.
# Usage: check_symbols.sh LIB SOURCE_DIR
set -euo pipefail
lib=$1
src=$2
here=$(cd "$(dirname "$0")" && pwd)

exported=$(nm -D --defined-only "$lib" | awk '{print $3}' | sed 's/@.*//' | sort -u)
# Functions of the public header: FERRY_NCCL_DECL(ret, name, ...) plus the
# two deprecated declarations written out by hand.
declared=$( { grep -oE 'FERRY_NCCL_DECL\([^,]+, *nccl[A-Za-z]+' "$src/include/nccl.h" |
              sed -E 's/.*, *//'; echo ncclResetDebugInit; } | sort -u)

fail=0
for f in $declared; do
  for name in "$f" "p$f"; do
    grep -qx "$name" <<<"$exported" || { echo "missing export: $name"; fail=1; }
  done
done
while read -r name; do
  [ -n "$name" ] || continue
  grep -qx "$name" <<<"$exported" || { echo "missing symbol PyTorch links: $name"; fail=1; }
done <"$here/torch-2.11-links.txt"

allowed=$( { echo "$declared"; sed 's/^/p/' <<<"$declared"; cat "$here/torch-2.11-links.txt";
             sed 's/^/p/' "$here/torch-2.11-links.txt"; } | sort -u)
while read -r name; do
  [ -n "$name" ] || continue
  case "$name" in ncclFerry*) continue ;; esac
  grep -qx "$name" <<<"$allowed" || { echo "unexpected export: $name"; fail=1; }
done <<<"$exported"

n=$(wc -l <<<"$exported")
if [ $fail -eq 0 ]; then
  echo "symbols OK: $n exported, $(wc -l <<<"$declared") header functions with pnccl aliases"
fi
exit $fail
