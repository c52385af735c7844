#!/usr/bin/env bash
# Register a deployed tgq stack's webhook with Telegram (setWebhook).
#
# Reads the WebhookUrl output and the stack's BotTokenParameterName,
# WebhookSecretParameterName and TelegramApiUrl parameters with
# `aws cloudformation describe-stacks`, the token and secret from SSM (with decryption),
# then calls setWebhook with secret_token, max_connections=40,
# drop_pending_updates=false and allowed_updates left as it is.
#
# Neither secret is printed or put on a command line: the request URL (it contains
# the token) and the form fields go to curl through its config on standard input.
# Only Telegram's "ok" and "description" are printed.
#
# Needs: aws (configured for the account and region of the stack), curl, and jq or python3.
# Usage: infra/set-webhook.sh [STACK_NAME]      (default: $STACK_NAME, else "tgq")
set -euo pipefail

stack="${1:-${STACK_NAME:-tgq}}"

die() { echo "set-webhook.sh: $*" >&2; exit 1; }
for cmd in aws curl; do
  command -v "$cmd" >/dev/null 2>&1 || die "'$cmd' not found"
done

stack_output() {
  aws cloudformation describe-stacks --stack-name "$stack" \
    --query "Stacks[0].Outputs[?OutputKey=='$1'].OutputValue" --output text
}
stack_parameter() {
  aws cloudformation describe-stacks --stack-name "$stack" \
    --query "Stacks[0].Parameters[?ParameterKey=='$1'].ParameterValue" --output text
}

webhook_url="$(stack_output WebhookUrl)"
token_param="$(stack_parameter BotTokenParameterName)"
secret_param="$(stack_parameter WebhookSecretParameterName)"
api_url="$(stack_parameter TelegramApiUrl)"
[[ "$webhook_url" == https://* ]] || die "stack $stack has no https WebhookUrl output (got '$webhook_url')"
[[ -n "$token_param" && "$token_param" != None ]] || die "stack $stack has no BotTokenParameterName"
[[ -n "$secret_param" && "$secret_param" != None ]] || die "stack $stack has no WebhookSecretParameterName"
[[ -n "$api_url" && "$api_url" != None ]] || api_url="https://api.telegram.org"

ssm_secret() {
  aws ssm get-parameter --name "$1" --with-decryption --query Parameter.Value --output text
}
token="$(ssm_secret "$token_param")"
secret="$(ssm_secret "$secret_param")"
# Both go inside double-quoted curl config strings: allow only characters that need no escaping.
[[ "$token" =~ ^[0-9]+:[A-Za-z0-9_-]+$ ]] || die "the value of $token_param does not look like a bot token"
[[ "$secret" =~ ^[A-Za-z0-9_-]{1,256}$ ]] \
  || die "the value of $secret_param must be 1-256 characters of A-Z a-z 0-9 _ - (Telegram's rule)"
[[ "$webhook_url" =~ ^https://[A-Za-z0-9./:_~%-]+$ ]] || die "unexpected characters in WebhookUrl"

echo "Setting the webhook of stack $stack to $webhook_url"
response="$(
  printf '%s\n' \
    "url = \"${api_url%/}/bot${token}/setWebhook\"" \
    "data-urlencode = \"url=${webhook_url}\"" \
    "data-urlencode = \"secret_token=${secret}\"" \
    "data-urlencode = \"max_connections=40\"" \
    "data-urlencode = \"drop_pending_updates=false\"" \
  | curl -s --max-time 30 --config -
)" || die "could not reach the Telegram Bot API"
unset token secret

# read_field FIELD: print one top-level field of Telegram's JSON answer.
if command -v jq >/dev/null 2>&1; then
  read_field() { jq -r --arg f "$1" 'if has($f) then .[$f] | tostring else "" end' <<<"$response"; }
elif command -v python3 >/dev/null 2>&1; then
  read_field() {
    python3 -c 'import json,sys; v=json.loads(sys.argv[2]).get(sys.argv[1], ""); print(str(v).lower() if isinstance(v, bool) else v)' \
      "$1" "$response"
  }
else
  die "need jq or python3 to read Telegram's answer"
fi
ok="$(read_field ok 2>/dev/null)" || die "Telegram's answer was not JSON"
description="$(read_field description 2>/dev/null)" || description=""
echo "ok: $ok"
echo "description: $description"
[[ "$ok" == true ]]
