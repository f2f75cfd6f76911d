"""moto's server, answering one request at a time.

Real DynamoDB applies each write to an item atomically (UpdateItem ADD, conditional
PutItem). moto's own `moto_server` is threaded and does not lock items, so concurrent
ADDs can lose increments there. Serving requests one at a time restores per-request
atomicity, which is what our tests rely on the real service for.

usage: moto_serial.py PORT
"""
import json
import signal
import sys

from werkzeug.serving import run_simple

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)


def fast_query_pages():
    """Query and Scan answers written with json.dumps instead of moto's generic
    serializer, which spends ~2 ms per item (a 1 MB page of 5,000 items: 12 s). The
    result is already DynamoDB's JSON (moto's DynamoResult); every Query the
    conformance suite and the stack tests make is read back through the AWS SDK."""
    from moto.dynamodb.responses import DynamoHandler

    slow = DynamoHandler.serialized

    def serialized(self, action_result):
        if self._get_action() in ("Query", "Scan") and isinstance(action_result.result, dict):
            headers = dict(self.response_headers)
            headers["status"] = 200
            return 200, headers, json.dumps(action_result.result)
        return slow(self, action_result)

    DynamoHandler.serialized = serialized


def main():
    fast_query_pages()
    port = int(sys.argv[1])
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    app = DomainDispatcherApplication(create_backend_app)
    run_simple("127.0.0.1", port, app, threaded=False, request_handler=MotoRequestHandler)


main()
