"""The Python equivalent of tgq's webhook: the secret header is checked, then an aiogram
Dispatcher takes the update, which is stored in DynamoDB (only if new) and sent to the FIFO queue,
grouped by chat."""

import asyncio
import hmac
import json

from aiogram import Bot, Dispatcher
from aiogram.types import Update

import config
from runtime import serve

SECRET = config.secret("TGQ_WEBHOOK_SECRET_PARAM")
bot = Bot("7000000001:webhook-never-calls-telegram")
dispatcher = Dispatcher()
loop = asyncio.new_event_loop()


# An outer middleware sees every update; a handler registered with `dispatcher.update()` would not
# run, since the Dispatcher's own update handler comes first and takes the update.
@dispatcher.update.outer_middleware()
async def store_and_enqueue(_handler, update: Update, _data):
    group = update.event.chat.id if getattr(update.event, "chat", None) else f"update:{update.update_id}"
    body = update.model_dump_json(exclude_none=True)
    config.dynamo.put_item(
        TableName=config.TABLE,
        Item={"pk": {"S": f"{config.BOT_ID}#{update.update_id}"}, "status": {"S": "RECEIVED"}, "body": {"S": body}},
        ConditionExpression="attribute_not_exists(pk)",
    )
    config.sqs.send_message(
        QueueUrl=config.QUEUE_URL,
        MessageBody=body,
        MessageGroupId=f"{config.BOT_ID}:{group}",
        MessageDeduplicationId=f"{config.BOT_ID}:{update.update_id}",
    )


def handle(event):
    given = (event.get("headers") or {}).get("x-telegram-bot-api-secret-token", "")
    if not hmac.compare_digest(given.encode(), SECRET.encode()):
        return {"statusCode": 401}
    update = Update.model_validate(json.loads(event["body"]), context={"bot": bot})
    loop.run_until_complete(dispatcher.feed_update(bot, update))
    return {"statusCode": 200}


serve(handle)
