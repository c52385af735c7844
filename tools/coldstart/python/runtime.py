"""A minimal Lambda Runtime API loop for the Python equivalents (what the managed Python runtime
does around a handler): poll /next, run the handler, post its result or its error."""

import http.client
import json
import os

BASE = "/2018-06-01/runtime/invocation"


def serve(handler):
    connection = http.client.HTTPConnection(os.environ["AWS_LAMBDA_RUNTIME_API"])
    while True:
        connection.request("GET", f"{BASE}/next")
        response = connection.getresponse()
        request_id = response.getheader("lambda-runtime-aws-request-id")
        event = json.loads(response.read())
        try:
            path, body = f"{BASE}/{request_id}/response", json.dumps(handler(event))
        except Exception as error:  # noqa: BLE001 - reported to the runtime, as Lambda does
            failure = {"errorType": type(error).__name__, "errorMessage": str(error)}
            path, body = f"{BASE}/{request_id}/error", json.dumps(failure)
        connection.request("POST", path, body, {"content-type": "application/json"})
        connection.getresponse().read()
