#!/usr/bin/env bash
# Builds the libFuzzer targets in a separate clang build and fuzzes each for
# SECONDS on a seed corpus made of valid messages (written below with the
# encoder, so seeds follow the format when it changes).
# Usage: tests/fuzz/run_fuzz.sh BUILD_DIR SECONDS      (fails on any crash)
set -euo pipefail
if [[ $# -ne 2 ]]; then
  echo "usage: $0 BUILD_DIR SECONDS" >&2
  exit 2
fi
build=$1
seconds=$2
src=$(cd "$(dirname "$0")/../.." && pwd)

CC=clang CXX=clang++ cmake -S "$src" -B "$build" -G Ninja -DFERRY_FUZZ=ON -DFERRY_CUDA=OFF \
  -DBUILD_TESTING=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C "$build" -j2 bootstrap_wire_fuzz

corpus="$build/fuzz-corpus/bootstrap_wire"
mkdir -p "$corpus"
# Seeds: hand-written little-endian encodings of each message kind.
magic='\xef\xcd\xab\x89\x67\x45\x23\x01'
addr4='\x04\x00\x39\x30\x00\x00\x00\x00\x7f\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00'
addr6='\x06\x00\x39\x30\x02\x00\x00\x00\xfd\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02'
printf "${magic}"'\x01\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x20\x00\x00\x00\x00\x00\x00\x00' >"$corpus/header_root_hello"
printf "${magic}"'\x04\x00\x00\x00\x03\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x10\x00\x00\x00\x00\x00\x00' >"$corpus/header_data"
printf '\x02\x00\x00\x00\x04\x00\x00\x00'"${addr4}" >"$corpus/root_hello_v4"
printf '\x02\x00\x00\x00\x04\x00\x00\x00'"${addr6}" >"$corpus/root_hello_v6"
printf '\x03\x00\x00\x00'"${addr4}" >"$corpus/root_reply"
printf '\x01\x00\x00\x00\x02\x00\x00\x00' >"$corpus/peer_hello"
printf "${addr6}" >"$corpus/address_v6"
{ printf 'FRYB\x01\x00\x00\x00'"${magic}""${addr4}"; head -c 88 /dev/zero; } >"$corpus/unique_id"

artifacts="$build/fuzz-artifacts/"
mkdir -p "$artifacts"
"$build/tests/fuzz/bootstrap_wire_fuzz" -max_total_time="$seconds" -print_final_stats=1 \
  -artifact_prefix="$artifacts" "$corpus"
echo "fuzz: bootstrap_wire_fuzz ran ${seconds}s without a crash"
