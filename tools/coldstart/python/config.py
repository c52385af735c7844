"""What both Python equivalents read at cold start, as tgq's functions do: the configuration from
the environment, the AWS clients, and a secret from SSM Parameter Store."""

import os

import boto3


def required(name):
    value = os.environ.get(name)
    if not value:
        raise RuntimeError(f"{name} is not set")
    return value


BOT_ID = os.environ.get("TGQ_BOT_ID", "demo")
TABLE = required("TGQ_TABLE")
QUEUE_URL = required("TGQ_QUEUE_URL")
DLQ_URL = required("TGQ_DLQ_URL")
dynamo = boto3.client("dynamodb")
sqs = boto3.client("sqs")


def secret(parameter):
    ssm = boto3.client("ssm")
    output = ssm.get_parameter(Name=required(parameter), WithDecryption=True)
    return output["Parameter"]["Value"]
