#!/usr/bin/env bash
# Remove what infra/localstack/deploy.sh created in LocalStack: the stack, the updates
# table it retains on delete (DeletionPolicy: Retain), and the two SSM parameters.
#
# Needs samlocal (pip install aws-sam-cli-local aws-sam-cli), awslocal and the `aws` CLI it runs
# (pip install awscli-local awscli), and LocalStack running (in Docker, with LOCALSTACK_AUTH_TOKEN). Environment: STACK_NAME (default tgq-local), BOT_TOKEN_PARAM, WEBHOOK_SECRET_PARAM,
# LOCALSTACK_ENDPOINT, AWS_DEFAULT_REGION as for deploy.sh; KEEP_DATA=1 keeps the table and
# the parameters. Usage: infra/localstack/teardown.sh
set -euo pipefail

stack="${STACK_NAME:-tgq-local}"
token_param="${BOT_TOKEN_PARAM:-/tgq/bot-token}"
secret_param="${WEBHOOK_SECRET_PARAM:-/tgq/webhook-secret}"
endpoint="${LOCALSTACK_ENDPOINT:-http://localhost:4566}"

export AWS_DEFAULT_REGION="${AWS_DEFAULT_REGION:-us-east-1}"
export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test
unset AWS_SESSION_TOKEN AWS_PROFILE
region="$AWS_DEFAULT_REGION"

die() { echo "teardown.sh: $*" >&2; exit 1; }

missing=()
need() { command -v "$1" >/dev/null 2>&1 || missing+=("'$1' ($2)"); }
need curl "your system's package manager"
need samlocal "pip install aws-sam-cli-local aws-sam-cli"
need awslocal "pip install awscli-local"
need aws "pip install awscli: awslocal runs it"
if ((${#missing[@]})); then
  die "missing: ${missing[*]}"
fi
curl -fsS -o /dev/null "$endpoint/_localstack/health" \
  || die "LocalStack is not answering at $endpoint (LOCALSTACK_AUTH_TOKEN=... localstack start -d; it runs in Docker)"

table=""
if awslocal cloudformation describe-stacks --region "$region" --stack-name "$stack" >/dev/null 2>&1; then
  # Learn the table name before the stack (and its outputs) are gone.
  table="$(awslocal cloudformation describe-stacks --region "$region" --stack-name "$stack" \
    --query "Stacks[0].Outputs[?OutputKey=='TableName'].OutputValue" --output text)"
  [[ "$table" == None ]] && table=""
  samlocal delete --stack-name "$stack" --region "$region" --no-prompts
  echo "Deleted stack $stack"
else
  echo "No stack $stack"
fi

if [[ "${KEEP_DATA:-0}" == 1 ]]; then
  echo "KEEP_DATA=1: kept table ${table:-(none)} and the SSM parameters"
  exit 0
fi
if [[ -n "$table" ]]; then
  if awslocal dynamodb delete-table --region "$region" --table-name "$table" >/dev/null 2>&1; then
    echo "Deleted table $table"
  else
    echo "Table $table already gone"
  fi
fi
for name in "$token_param" "$secret_param"; do
  if awslocal ssm delete-parameter --region "$region" --name "$name" >/dev/null 2>&1; then
    echo "Deleted SSM parameter $name"
  else
    echo "SSM parameter $name already gone"
  fi
done
