#!/usr/bin/env bash
# A device call brings back at most 8 files from $OUT (session 43: the rest
# are left out). Usage: scripts/fold_logs.sh DIR -- when DIR holds more than
# 8 files, they become one archive, DIR/logs-folded.tgz. Called once, at the
# end of an entry script (device_p2p.sh, or device_net.sh run on its own).
set -uo pipefail
dir=$1
[ "$(find "$dir" -type f | wc -l)" -gt 8 ] || exit 0
tmp=$(mktemp /tmp/fold-logs.XXXXXX.tgz)
tar czf "$tmp" -C "$dir" . && find "$dir" -type f -delete && mv "$tmp" "$dir/logs-folded.tgz" &&
  echo "fold_logs.sh: $dir folded into $dir/logs-folded.tgz"
