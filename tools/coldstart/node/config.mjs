// What both Node.js equivalents read at cold start, as tgq's functions do: the configuration from
// the environment, the AWS clients, and a secret from SSM Parameter Store.
import { DynamoDBClient } from "@aws-sdk/client-dynamodb";
import { SQSClient } from "@aws-sdk/client-sqs";
import { GetParameterCommand, SSMClient } from "@aws-sdk/client-ssm";

export function required(name) {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
}

export const botId = process.env.TGQ_BOT_ID ?? "demo";
export const table = required("TGQ_TABLE");
export const queueUrl = required("TGQ_QUEUE_URL");
export const dlqUrl = required("TGQ_DLQ_URL");
export const dynamo = new DynamoDBClient({});
export const sqs = new SQSClient({});

export async function secret(parameter) {
  const ssm = new SSMClient({});
  const output = await ssm.send(new GetParameterCommand({ Name: required(parameter), WithDecryption: true }));
  return output.Parameter.Value;
}

// The bot's own identity, so grammY does not call getMe at start (tgq does not either).
export const botInfo = {
  id: 7000000001, is_bot: true, first_name: "tgq demo", username: "tgq_demo_bot",
  can_join_groups: true, can_read_all_group_messages: false, supports_inline_queries: false,
  can_connect_to_business: false, has_main_web_app: false,
};
