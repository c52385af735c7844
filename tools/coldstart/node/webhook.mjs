// The Node.js equivalent of tgq's webhook: grammY's webhookCallback checks the secret header, then
// the update is stored in DynamoDB (only if new) and sent to the FIFO queue, grouped by chat.
import { Bot, webhookCallback } from "grammy";
import { PutItemCommand } from "@aws-sdk/client-dynamodb";
import { SendMessageCommand } from "@aws-sdk/client-sqs";
import { botId, botInfo, dynamo, queueUrl, secret, sqs, table } from "./config.mjs";
import { serve } from "./runtime.mjs";

const secretToken = await secret("TGQ_WEBHOOK_SECRET_PARAM");
const bot = new Bot("7000000001:webhook-never-calls-telegram", { botInfo });
bot.use(async (ctx) => {
  const id = ctx.update.update_id;
  const group = ctx.chat?.id ?? `user:${ctx.from?.id ?? id}`;
  await dynamo.send(new PutItemCommand({
    TableName: table,
    Item: { pk: { S: `${botId}#${id}` }, status: { S: "RECEIVED" }, body: { S: JSON.stringify(ctx.update) } },
    ConditionExpression: "attribute_not_exists(pk)",
  }));
  await sqs.send(new SendMessageCommand({
    QueueUrl: queueUrl,
    MessageBody: JSON.stringify(ctx.update),
    MessageGroupId: `${botId}:${group}`,
    MessageDeduplicationId: `${botId}:${id}`,
  }));
});
const handle = webhookCallback(bot, "aws-lambda-async", { secretToken });

await serve((event) => handle(event, {}));
