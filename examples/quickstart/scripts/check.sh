#!/bin/sh
# fetch (exit-code tier): 0 when the file matches the desired state,
# 2 when it differs or is missing (drift), 1 when the check cannot run.
. "$(dirname "$0")/lib.sh"
if [ ! -f "$target_file" ]; then
  echo "$target_file does not exist"
  exit 2
fi
if desired_state | cmp -s - "$target_file"; then
  exit 0
fi
echo "$target_file differs from the desired state"
exit 2
