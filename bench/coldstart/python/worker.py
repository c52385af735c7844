"""The Python equivalent of tgq's worker: each SQS record is claimed in DynamoDB and handed to an
aiogram Dispatcher that answers /start and text; failures are reported per record."""

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


@dispatcher.message(CommandStart())
async def start(message: Message):
    await message.answer("hello")


@dispatcher.message(F.text)
async def echo(message: Message):
    await message.answer(f"you said: {message.text}")


def handle(event):
    failures = []
    for record in event["Records"]:
        try:
            update = Update.model_validate(json.loads(record["body"]), context={"bot": bot})
            config.dynamo.update_item(
                TableName=config.TABLE,
                Key={"pk": {"S": f"{config.BOT_ID}#{update.update_id}"}},
                UpdateExpression="SET #s = :running ADD attempts :one",
                ExpressionAttributeNames={"#s": "status"},
                ExpressionAttributeValues={":running": {"S": "RUNNING"}, ":one": {"N": "1"}},
            )
            loop.run_until_complete(dispatcher.feed_update(bot, update))
        except Exception:  # noqa: BLE001 - a failed record is retried by SQS, as in tgq
            failures.append({"itemIdentifier": record["messageId"]})
    return {"batchItemFailures": failures}


serve(handle)
