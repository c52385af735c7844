"""moto server as tgq's tests run it: `.venv/bin/python scripts/moto_server.py -H 127.0.0.1 -p PORT`.

It is moto's own server (the arguments are `moto_server`'s) with one change: DynamoDB requests are
served one at a time. moto's server answers every request on a thread of its own, and its DynamoDB
checks a write's condition and then makes the write as two steps with nothing between them, so two
conditional writes racing for one item can both pass their condition. DynamoDB itself never lets
that happen: a conditional write is atomic on its item. Serving DynamoDB requests in turn gives
moto that guarantee, which the lease's and the dedup's tests rely on; SQS, CloudFormation and the
rest stay concurrent, so a long poll on a queue still blocks nothing else.
"""

import functools
import threading

from moto.dynamodb.responses import DynamoHandler
from moto.server import main

_DYNAMODB = threading.Lock()
_call_action = DynamoHandler.call_action


@functools.wraps(_call_action)
def _one_at_a_time(self):
    with _DYNAMODB:
        return _call_action(self)


DynamoHandler.call_action = _one_at_a_time

if __name__ == "__main__":
    main()
