#!/bin/sh
# getInfo: freeform text for people, shown as printed.
set -eu
service="${1#--service=}"
echo "Console: https://console.example.com/services/$service?env=$VERGENCE_RELEASE_CHANNEL"
