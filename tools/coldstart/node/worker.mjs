// The Node.js equivalent of tgq's worker: each SQS record is claimed in DynamoDB (its chat's state
// read alongside), handed to a grammY bot that answers /start and text, each reply's intent written
// before it is sent, and the record settled; failures are reported per record. The same DynamoDB
// requests as tgq's worker makes for an update with one reply.
import { Bot } from "grammy";
import { GetItemCommand, UpdateItemCommand } from "@aws-sdk/client-dynamodb";
import { botId, botInfo, dynamo, secret, table } from "./config.mjs";
import { serve } from "./runtime.mjs";

const token = await secret("TELEGRAM_BOT_TOKEN_PARAM");
const bot = new Bot(token, { botInfo, client: { apiRoot: process.env.TELEGRAM_API_URL } });

function write(pk, expression, values) {
  return dynamo.send(new UpdateItemCommand({
    TableName: table,
    Key: { pk: { S: pk } },
    UpdateExpression: expression,
    ExpressionAttributeNames: { "#s": "status" },
    ExpressionAttributeValues: values,
  }));
}

// Writes the send's intent, then sends.
async function reply(ctx, text) {
  await write(`${botId}#${ctx.update.update_id}`, "SET #s = :s, intent = :intent", {
    ":s": { S: "PROCESSING" },
    ":intent": { S: JSON.stringify({ method: "sendMessage", chat_id: ctx.chat.id }) },
  });
  return ctx.reply(text);
}

bot.command("start", (ctx) => reply(ctx, "hello"));
bot.on("message:text", (ctx) => reply(ctx, `you said: ${ctx.message.text}`));

async function handle(event) {
  const batchItemFailures = [];
  for (const record of event.Records) {
    try {
      const update = JSON.parse(record.body);
      const pk = `${botId}#${update.update_id}`;
      await Promise.all([
        write(pk, "SET #s = :running ADD attempts :one", {
          ":running": { S: "PROCESSING" }, ":one": { N: "1" },
        }),
        dynamo.send(new GetItemCommand({
          TableName: table,
          Key: { pk: { S: `${botId}#state#${record.attributes.MessageGroupId}` } },
        })),
      ]);
      await bot.handleUpdate(update);
      await write(pk, "SET #s = :done", { ":done": { S: "DONE" } });
    } catch {
      batchItemFailures.push({ itemIdentifier: record.messageId });
    }
  }
  return { batchItemFailures };
}

await serve(handle);
