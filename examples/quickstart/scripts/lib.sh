# Shared by the quickstart scripts: where a service's file lives and what it
# should contain for the desired version. Sourced, not run.
set -eu

replicas=1
region=unknown
for arg in "$@"; do
  case "$arg" in
    --replicas=*) replicas="${arg#--replicas=}" ;;
    --region=*) region="${arg#--region=}" ;;
  esac
done

target_dir="${QUICKSTART_DEPLOY_DIR:-deployed}/$VERGENCE_RELEASE_CHANNEL"
target_file="$target_dir/$SERVICE.txt"

# The desired content of the service's file.
desired_state() {
  printf 'service=%s\nversion=%s\nregion=%s\nreplicas=%s\n' \
    "$SERVICE" "$VERGENCE_SERVICE_VERSION" "$region" "$replicas"
}
