"""The Python equivalent of tgq's worker: each SQS record is claimed in DynamoDB (its chat's state
read alongside), handed to an aiogram Dispatcher that answers /start and text, each reply's intent
written before it is sent, and the record settled; failures are reported per record. The same
DynamoDB requests as tgq's worker makes for an update with one reply."""

import asyncio
import json
import os

from aiogram import Bot, Dispatcher, F
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import TelegramAPIServer
from aiogram.filters import CommandStart
from aiogram.types import Message, Update

import config
from runtime import serve

api = TelegramAPIServer.from_base(os.environ.get("TELEGRAM_API_URL", "https://api.telegram.org"))
bot = Bot(config.secret("TELEGRAM_BOT_TOKEN_PARAM"), session=AiohttpSession(api=api))
dispatcher = Dispatcher()
loop = asyncio.new_event_loop()


def update_record(pk, expression, values):
    config.dynamo.update_item(
        TableName=config.TABLE,
        Key={"pk": {"S": pk}},
        UpdateExpression=expression,
        ExpressionAttributeNames={"#s": "status"},
        ExpressionAttributeValues=values,
    )


async def reply(message: Message, update_id: int, text: str):
    """Writes the send's intent, then sends."""
    intent = json.dumps({"method": "sendMessage", "chat_id": message.chat.id})
    update_record(
        f"{config.BOT_ID}#{update_id}",
        "SET #s = :s, intent = :intent",
        {":s": {"S": "PROCESSING"}, ":intent": {"S": intent}},
    )
    await message.answer(text)


@dispatcher.message(CommandStart())
async def start(message: Message, event_update: Update):
    await reply(message, event_update.update_id, "hello")


@dispatcher.message(F.text)
async def echo(message: Message, event_update: Update):
    await reply(message, event_update.update_id, f"you said: {message.text}")


def handle(event):
    failures = []
    for record in event["Records"]:
        try:
            update = Update.model_validate(json.loads(record["body"]), context={"bot": bot})
            pk = f"{config.BOT_ID}#{update.update_id}"
            update_record(
                pk,
                "SET #s = :running ADD attempts :one",
                {":running": {"S": "PROCESSING"}, ":one": {"N": "1"}},
            )
            group = record.get("attributes", {}).get("MessageGroupId", "")
            config.dynamo.get_item(
                TableName=config.TABLE, Key={"pk": {"S": f"{config.BOT_ID}#state#{group}"}}
            )
            loop.run_until_complete(dispatcher.feed_update(bot, update))
            update_record(pk, "SET #s = :done", {":done": {"S": "DONE"}})
        except Exception:  # noqa: BLE001 - a failed record is retried by SQS, as in tgq
            failures.append({"itemIdentifier": record["messageId"]})
    return {"batchItemFailures": failures}


serve(handle)
