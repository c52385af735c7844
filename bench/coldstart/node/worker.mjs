// The Node.js equivalent of tgq's worker: each SQS record is claimed in DynamoDB and handed to a
// grammY bot that answers /start and text; failures are reported per record.
import { Bot } from "grammy";
import { UpdateItemCommand } from "@aws-sdk/client-dynamodb";
import { botId, botInfo, dynamo, secret, table } from "./config.mjs";
import { serve } from "./runtime.mjs";

const token = await secret("TELEGRAM_BOT_TOKEN_PARAM");
const bot = new Bot(token, { botInfo, client: { apiRoot: process.env.TELEGRAM_API_URL } });
bot.command("start", (ctx) => ctx.reply("hello"));
bot.on("message:text", (ctx) => ctx.reply(`you said: ${ctx.message.text}`));

async function handle(event) {
  const batchItemFailures = [];
  for (const record of event.Records) {
    try {
      const update = JSON.parse(record.body);
      await dynamo.send(new UpdateItemCommand({
        TableName: table,
        Key: { pk: { S: `${botId}#${update.update_id}` } },
        UpdateExpression: "SET #s = :running ADD attempts :one",
        ExpressionAttributeNames: { "#s": "status" },
        ExpressionAttributeValues: { ":running": { S: "RUNNING" }, ":one": { N: "1" } },
      }));
      await bot.handleUpdate(update);
    } catch {
      batchItemFailures.push({ itemIdentifier: record.messageId });
    }
  }
  return { batchItemFailures };
}

await serve(handle);
