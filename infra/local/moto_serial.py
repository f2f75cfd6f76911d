"""moto's server, answering one request at a time.

Real DynamoDB applies each write to an item atomically (UpdateItem ADD, conditional
PutItem). moto's own `moto_server` is threaded and does not lock items, so concurrent
ADDs can lose increments there. Serving requests one at a time restores per-request
atomicity, which is what our tests rely on the real service for.

usage: moto_serial.py PORT
"""
import signal
import sys

from werkzeug.serving import run_simple

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)


def main():
    port = int(sys.argv[1])
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    app = DomainDispatcherApplication(create_backend_app)
    run_simple("127.0.0.1", port, app, threaded=False, request_handler=MotoRequestHandler)


main()
