#!/usr/bin/env bash
# Deploy the tgq SAM stack (template.yaml) to a running LocalStack.
#
# Needs:
#   - Docker, and LocalStack running with its auth token:
#     `LOCALSTACK_AUTH_TOKEN=... localstack start -d` (pip install localstack; on an x86_64 host the
#     arm64 functions also need qemu/binfmt, see infra/README.md)
#   - samlocal (pip install aws-sam-cli-local, which wraps the SAM CLI: pip install aws-sam-cli)
#   - awslocal (pip install awscli-local) and the `aws` CLI it runs (pip install awscli)
#   - cargo lambda (pip install cargo-lambda) and zig (pip install ziglang) for `samlocal build`
#   - curl
#
# `tgq deploy` targets LocalStack the same way instead of this script: with
# AWS_ENDPOINT_URL=http://localhost:4566 (and LocalStack's test credentials) its own calls and the
# SAM CLI's (boto3 honours the variable) go there.
#
# Environment (all optional except TELEGRAM_BOT_TOKEN):
#   TELEGRAM_BOT_TOKEN          bot token to store in SSM (required; any value for offline tests)
#   TGQ_WEBHOOK_SECRET          webhook secret to store in SSM (default: a random one)
#   STACK_NAME                  CloudFormation stack name (default: tgq-local)
#   TGQ_BOT_ID                  BotId parameter (default: localbot)
#   BOT_TOKEN_PARAM             SSM name of the token (default: /tgq/bot-token)
#   WEBHOOK_SECRET_PARAM        SSM name of the secret (default: /tgq/webhook-secret)
#   TELEGRAM_API_URL            Bot API base URL the worker calls (default: https://api.telegram.org)
#   LOCALSTACK_ENDPOINT         LocalStack edge URL (default: http://localhost:4566)
#   AWS_DEFAULT_REGION          (default: us-east-1)
#   SKIP_BUILD=1                reuse the last `samlocal build` output
#
# Secrets are passed to awslocal through a private temporary file, never on a command
# line, and never printed. Usage: infra/localstack/deploy.sh
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"

stack="${STACK_NAME:-tgq-local}"
bot_id="${TGQ_BOT_ID:-localbot}"
token_param="${BOT_TOKEN_PARAM:-/tgq/bot-token}"
secret_param="${WEBHOOK_SECRET_PARAM:-/tgq/webhook-secret}"
api_url="${TELEGRAM_API_URL:-https://api.telegram.org}"
endpoint="${LOCALSTACK_ENDPOINT:-http://localhost:4566}"

# LocalStack's dummy credentials (account 000000000000). Real ones are never used here,
# so nothing can reach a real account and nothing real is printed below.
export AWS_DEFAULT_REGION="${AWS_DEFAULT_REGION:-us-east-1}"
export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test
unset AWS_SESSION_TOKEN AWS_PROFILE
region="$AWS_DEFAULT_REGION"

die() { echo "deploy.sh: $*" >&2; exit 1; }

# Every tool missing is named at once, with what installs it.
missing=()
need() { command -v "$1" >/dev/null 2>&1 || missing+=("'$1' ($2)"); }
need curl "your system's package manager"
need samlocal "pip install aws-sam-cli-local aws-sam-cli"
need sam "pip install aws-sam-cli: samlocal runs it"
need awslocal "pip install awscli-local"
need aws "pip install awscli: awslocal runs it"
if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
  need cargo-lambda "pip install cargo-lambda, for samlocal build"
  command -v zig >/dev/null 2>&1 || command -v python-zig >/dev/null 2>&1 \
    || missing+=("'zig' (pip install ziglang, which cargo-lambda links with)")
fi
if ((${#missing[@]})); then
  die "missing: ${missing[*]}"
fi
if ! curl -fsS -o /dev/null "$endpoint/_localstack/health"; then
  [[ -n "${LOCALSTACK_AUTH_TOKEN:-}" ]] \
    || die "LocalStack is not answering at $endpoint, and LOCALSTACK_AUTH_TOKEN is not set: LocalStack needs its auth token (LOCALSTACK_AUTH_TOKEN=... localstack start -d; it runs in Docker)"
  die "LocalStack is not answering at $endpoint (LOCALSTACK_AUTH_TOKEN=... localstack start -d; it runs in Docker)"
fi

[[ -n "${TELEGRAM_BOT_TOKEN:-}" ]] || die "set TELEGRAM_BOT_TOKEN (any placeholder works when nothing calls Telegram)"

secret="${TGQ_WEBHOOK_SECRET:-}"
keep_secret=0
if [[ -z "$secret" ]]; then
  if awslocal ssm get-parameter --region "$region" --name "$secret_param" >/dev/null 2>&1; then
    keep_secret=1 # a re-deploy keeps the secret it generated before
  else
    # 64 hex characters: inside Telegram's secret_token alphabet (A-Z a-z 0-9 _ -).
    secret="$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')"
    echo "Generated a webhook secret"
  fi
fi
[[ "$keep_secret" == 1 || "$secret" =~ ^[A-Za-z0-9_-]{1,256}$ ]] \
  || die "TGQ_WEBHOOK_SECRET must be 1-256 characters of A-Z a-z 0-9 _ -"

# put_secure NAME VALUE: store VALUE as a SecureString without exposing it in `ps`.
tmpdir="$(mktemp -d)"
trap 'rm -rf "$tmpdir"' EXIT
chmod 700 "$tmpdir"
put_secure() {
  local name="$1" file="$tmpdir/value"
  (umask 077 && printf '%s' "$2" >"$file")
  awslocal ssm put-parameter --region "$region" --name "$name" --type SecureString \
    --value "file://$file" --overwrite >/dev/null
  rm -f "$file"
  echo "Stored SSM SecureString $name"
}
put_secure "$token_param" "$TELEGRAM_BOT_TOKEN"
if [[ "$keep_secret" == 1 ]]; then
  echo "Kept the existing SSM SecureString $secret_param"
else
  put_secure "$secret_param" "$secret"
fi
unset secret

cd "$root"
if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
  samlocal build --beta-features --template-file template.yaml
fi
samlocal deploy \
  --stack-name "$stack" \
  --region "$region" \
  --resolve-s3 \
  --capabilities CAPABILITY_IAM \
  --no-confirm-changeset \
  --no-fail-on-empty-changeset \
  --parameter-overrides "BotId=$bot_id BotTokenParameterName=$token_param WebhookSecretParameterName=$secret_param TelegramApiUrl=$api_url WebhookEndpoint=FunctionUrl"

output() {
  awslocal cloudformation describe-stacks --region "$region" --stack-name "$stack" \
    --query "Stacks[0].Outputs[?OutputKey=='$1'].OutputValue" --output text
}

echo
echo "Stack $stack outputs:"
awslocal cloudformation describe-stacks --region "$region" --stack-name "$stack" \
  --query 'Stacks[0].Outputs[].[OutputKey,OutputValue]' --output table

cat <<EXPORTS

# Point tgq (CLI, tests) at this stack:
export AWS_ENDPOINT_URL=$endpoint
export AWS_REGION=$region AWS_DEFAULT_REGION=$region
export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test
export TGQ_BOT_ID=$bot_id
export TGQ_TABLE=$(output TableName)
export TGQ_QUEUE_URL=$(output UpdatesQueueUrl)
export TGQ_DLQ_URL=$(output DeadLetterQueueUrl)
export TGQ_WEBHOOK_SECRET_PARAM=$secret_param TELEGRAM_BOT_TOKEN_PARAM=$token_param

# Webhook: $(output WebhookUrl)
# It answers only requests whose X-Telegram-Bot-Api-Secret-Token header holds the secret:
#   awslocal ssm get-parameter --with-decryption --name $secret_param --query Parameter.Value --output text
EXPORTS
