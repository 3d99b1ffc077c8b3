#!/bin/sh
# apply (apply-only tier): records that migrations ran for this version.
# Vergence runs it once per desired version; rerunning `vergence up` does not.
set -eu
SERVICE="$1"
dir="${QUICKSTART_DEPLOY_DIR:-deployed}/$VERGENCE_RELEASE_CHANNEL"
mkdir -p "$dir"
echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) migrated $SERVICE to $VERGENCE_SERVICE_VERSION" >> "$dir/$SERVICE.log"
echo "migrations for $VERGENCE_SERVICE_VERSION done"
