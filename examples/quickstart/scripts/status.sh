#!/bin/sh
# fetch (structured tier): prints which version the file holds as JSON.
# A file whose other settings differ from the desired state is "drifted".
. "$(dirname "$0")/lib.sh"
if [ ! -f "$target_file" ]; then
  printf '{"objects":[{"name":"%s","objectType":"file","versions":[],"status":"SUCCEEDED"}]}\n' "$SERVICE"
  exit 0
fi
version=$(sed -n 's/^version=//p' "$target_file")
drifted=false
if [ "$version" = "$VERGENCE_SERVICE_VERSION" ] && ! desired_state | cmp -s - "$target_file"; then
  drifted=true
fi
printf '{"objects":[{"name":"%s","objectType":"file","versions":[{"version":"%s","active":true,"drifted":%s}],"status":"SUCCEEDED","message":"%s"}]}\n' \
  "$SERVICE" "$version" "$drifted" "$target_file"
