#!/usr/bin/env bash
# Runs a command with a local AWS-compatible server (moto: DynamoDB, SQS, KMS) on
# 127.0.0.1 and a free port, and stops that server by its PID when the command ends.
#   usage: infra/local/with-moto.sh VENV_DIR COMMAND...
# The command sees UMPIRE_TEST_AWS_ENDPOINT (and AWS_* test credentials).
set -euo pipefail
venv="$1"; shift
port=$("$venv/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
log="$(mktemp -t moto.XXXXXX.log)"
"$venv/bin/python" "$(dirname "$0")/moto_serial.py" "$port" >"$log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -f "$log"' EXIT
for _ in $(seq 1 100); do
  if "$venv/bin/python" -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$port/moto-api/', timeout=1)" 2>/dev/null; then
    ready=1; break
  fi
  if ! kill -0 "$pid" 2>/dev/null; then break; fi
  sleep 0.2
done
if [ "${ready:-0}" != 1 ]; then
  echo "with-moto: the local AWS server did not start on port $port:" >&2
  cat "$log" >&2
  exit 1
fi
export UMPIRE_TEST_AWS_ENDPOINT="http://127.0.0.1:$port"
export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1 AWS_DEFAULT_REGION=us-east-1
"$@"
