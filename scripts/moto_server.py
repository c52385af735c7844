"""moto server as tgq's tests run it: `.venv/bin/python scripts/moto_server.py -H 127.0.0.1 -p PORT`.

It is moto's own server (the arguments are `moto_server`'s) with four changes. First, DynamoDB
requests are served one at a time. moto's server answers every request on a thread of its own, and its DynamoDB
checks a write's condition and then makes the write as two steps with nothing between them, so two
conditional writes racing for one item can both pass their condition. DynamoDB itself never lets
that happen: a conditional write is atomic on its item. Serving DynamoDB requests in turn gives
moto that guarantee, which the lease's and the dedup's tests rely on; SQS, CloudFormation and the
rest stay concurrent, so a long poll on a queue still blocks nothing else.

Second, a TransactWriteItems backs up only the items it writes. moto copies every table a
transaction touches, whole, before it writes (moto/dynamodb/models/__init__.py,
`transact_write_items`), to put them back if the transaction is cancelled; a transaction then costs
time in proportion to the table, where DynamoDB's costs the same at any size, and a broadcast's
10,000 recipients make every settle slower than Telegram's pace. Backing up the written items
keeps the cancelled transaction's all-or-nothing, at DynamoDB's cost.

Third, no full garbage collections. CPython collects its oldest generation each time the objects
it holds grew by a quarter, and a collection walks every one of them with the interpreter stopped;
as a broadcast's recipients and the budget's items fill the tables, each stop grows (in the drill's
1,000-recipient broadcast, from 66 ms to 288 ms, one every 6 to 14 s), with every request held. DynamoDB has no such pauses, and a send whose budget slot went by during one is booked again,
so the drills measured moto's collector rather than tgq. moto's items are freed by their reference
counts, and the young generations still collect the cycles a request leaves; what the oldest would
have found stays in memory until the server stops (after the drill's 10,000-recipient broadcast the
server's resident memory is about 375 MB, `ps -o rss`).

Fourth, a FIFO group is held only by its messages in flight. moto counts a message whose
visibility expired as holding its group until a receive reaches it in the queue, so when several
messages of one group came back together (their consumer died) the first was skipped for the
second, and the group came back last-first. Here a receive first lets go of every message whose
visibility expired, and a group counts as held only while one of its messages is hidden: the group
comes back in order, as SQS hands it out.
"""

import copy
import functools
import gc
import threading

import moto.dynamodb.models as dynamodb_models
from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models.dynamo_type import DynamoType
from moto.dynamodb.models.table import Table
from moto.dynamodb.responses import DynamoHandler
from moto.server import main
from moto.sqs.models import Queue, SQSBackend

_DYNAMODB = threading.Lock()
# Collections of the young generations between two of the oldest: never, in a test's lifetime.
_NO_FULL_COLLECTION = 10**9
_call_action = DynamoHandler.call_action


@functools.wraps(_call_action)
def _one_at_a_time(self):
    with _DYNAMODB:
        return _call_action(self)


DynamoHandler.call_action = _one_at_a_time


class _TablesUncopied:
    """`copy` as moto's DynamoDB models see it during one transaction: a table is not copied."""

    def deepcopy(self, value, *args, **kwargs):
        if isinstance(value, Table):
            return value
        return copy.deepcopy(value, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(copy, name)


_transact_write_items = DynamoDBBackend.transact_write_items


@functools.wraps(_transact_write_items)
def _backing_up_written_items(self, transact_items):
    touched = []
    for entry in transact_items:
        _, op = next(iter(entry.items()))
        table = self.tables.get(op.get("TableName"))
        # Tables with a sort key, or an operation this cannot read, keep moto's own backup.
        if table is None or table.range_key_attr is not None:
            return _transact_write_items(self, transact_items)
        key = op.get("Item") or op.get("Key") or {}
        if table.hash_key_attr not in key:
            return _transact_write_items(self, transact_items)
        touched.append((table, DynamoType(key[table.hash_key_attr])))
    saved = [
        (table, hash_value, hash_value in table.items, copy.deepcopy(table.items.get(hash_value)))
        for table, hash_value in touched
    ]
    # Requests are served one at a time (above): nothing else sees the module's `copy` meanwhile.
    dynamodb_models.copy = _TablesUncopied()
    try:
        return _transact_write_items(self, transact_items)
    except Exception:
        for table, hash_value, existed, item in reversed(saved):
            if existed:
                table.items[hash_value] = item
            else:
                table.items.pop(hash_value, None)
        raise
    finally:
        dynamodb_models.copy = copy


DynamoDBBackend.transact_write_items = _backing_up_written_items


def _groups_in_flight(queue):
    """The groups a receive must hold back: those with a message received and still hidden."""
    return {
        message.group_id
        for message in queue.pending_messages
        if message.group_id is not None and not message.visible
    }


Queue.pending_message_groups = property(_groups_in_flight)
_receive_message = SQSBackend.receive_message


@functools.wraps(_receive_message)
def _expired_let_go(self, queue_name, *args, **kwargs):
    queue = self.get_queue(queue_name)
    for message in [m for m in queue.pending_messages if m.visible]:
        queue.pending_messages.discard(message)
    return _receive_message(self, queue_name, *args, **kwargs)


SQSBackend.receive_message = _expired_let_go

if __name__ == "__main__":
    # No full collections (see above): the young generations still collect as CPython's defaults do.
    gen0, gen1, _ = gc.get_threshold()
    gc.set_threshold(gen0, gen1, _NO_FULL_COLLECTION)
    main()
