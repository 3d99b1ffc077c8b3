#!/bin/sh
# fetch (structured): the object and the version that runs. No "status":
# this runtime has no rollout of its own, so the versions decide.
set -eu
service="${1#--service=}"
file="deployed/$VERGENCE_RELEASE_CHANNEL/$service"
if [ ! -f "$file" ]; then
  echo '{"objects": []}'
  exit 0
fi
printf '{"objects": [{"name": "%s", "objectType": "my-type", "versions": [{"version": "%s", "active": true}]}]}\n' \
  "$service" "$(cat "$file")"
