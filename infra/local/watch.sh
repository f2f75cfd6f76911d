#!/usr/bin/env bash
# The functions under `cargo lambda watch`, routed like the HttpApi
# ([workspace.metadata.lambda.watch.router] in Cargo.toml), against a fresh local
# AWS-compatible server (moto: DynamoDB, SQS) with the tables created.
#   usage: infra/local/watch.sh VENV_DIR PORT
# Every UMPIRE_* variable in the caller's environment reaches the functions (payment
# rails, for example: `make devnet` prints them). The signing seed is a local one,
# kept in .cache/watch-seed. Stop with Ctrl-C (or kill the process group).
set -euo pipefail
venv="$1"; port="$2"
root="$(cd "$(dirname "$0")/../.." && pwd)"
if [ "${WATCH_INNER:-}" != 1 ]; then
  WATCH_INNER=1 exec "$root/infra/local/with-moto.sh" "$venv" "$0" "$venv" "$port"
fi
cd "$root"
export AWS_ENDPOINT_URL="$UMPIRE_TEST_AWS_ENDPOINT"
seed_file="$root/.cache/watch-seed"
if [ ! -s "$seed_file" ]; then
  mkdir -p "$(dirname "$seed_file")"
  "$venv/bin/python" -c 'import secrets; print(secrets.token_hex(32))' >"$seed_file"
fi
cargo run --quiet -p umpire-functions --example local_tables
queue_url=$("$venv/bin/python" -c '
import sys, boto3
sqs = boto3.client("sqs", endpoint_url=sys.argv[1], region_name="us-east-1")
print(sqs.create_queue(QueueName="umpire-jobs")["QueueUrl"])' "$AWS_ENDPOINT_URL")
# Passed as --env-var flags: cargo lambda's env-file parser refuses values with spaces.
vars=(
  "AWS_ENDPOINT_URL=$AWS_ENDPOINT_URL"
  "AWS_ACCESS_KEY_ID=$AWS_ACCESS_KEY_ID"
  "AWS_SECRET_ACCESS_KEY=$AWS_SECRET_ACCESS_KEY"
  "AWS_REGION=$AWS_REGION"
  "UMPIRE_SIGNING_SEED_HEX=$(cat "$seed_file")"
  "UMPIRE_JOBS_QUEUE_URL=$queue_url"
)
while IFS= read -r -d '' kv; do
  case "$kv" in
    UMPIRE_TEST_AWS_ENDPOINT=*|UMPIRE_SIGNING_SEED_HEX=*) ;;
    UMPIRE_*) vars+=("$kv") ;;
  esac
done < <(env -0)
flags=()
for kv in "${vars[@]}"; do flags+=(--env-var "$kv"); done
echo "watch: the API on http://127.0.0.1:$port (functions compile on their first request)" >&2
# Built with the test switches: a shipped function refuses the plain seed above and
# judging without a checker function (here the checker's own binary, run locally).
PATH="$venv/bin:$PATH" exec cargo lambda watch -p umpire-functions --features test-switches \
  --invoke-address 127.0.0.1 --invoke-port "$port" --ignore-changes "${flags[@]}"
