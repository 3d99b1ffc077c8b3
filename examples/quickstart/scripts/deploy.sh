#!/bin/sh
# apply: writes the desired state of $SERVICE to its file, atomically.
. "$(dirname "$0")/lib.sh"
mkdir -p "$target_dir"
desired_state > "$target_file.tmp"
mv "$target_file.tmp" "$target_file"
echo "deployed $SERVICE $VERGENCE_SERVICE_VERSION to $target_file"
