"""moto's server, answering one request at a time.

Real DynamoDB applies each write to an item atomically (UpdateItem ADD, conditional
PutItem). moto's own `moto_server` is threaded and does not lock items, so concurrent
ADDs can lose increments there. Serving requests one at a time restores per-request
atomicity, which is what our tests rely on the real service for.

usage: moto_serial.py PORT
"""
import copy
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


READS = {
    "GetItem",
    "BatchGetItem",
    "Query",
    "Scan",
    "TransactGetItems",
    "DescribeTable",
    "DescribeTimeToLive",
    "ListTables",
    "ListTagsOfResource",
}


def index_pages_in_order():
    """A paged Query on an index served from where the last page ended.

    moto answers every page of an index Query by listing the whole table, sorting it,
    then walking the sorted list to the page's ExclusiveStartKey: a report that reads
    100,000 rows in 11 pages costs it a minute, where DynamoDB serves a page in tens
    of milliseconds. Here the first page runs moto's own code, and the sorted
    candidates it computed are kept (per table, index, key condition and direction)
    until the next request that is not a read; a later page starts right after its
    ExclusiveStartKey in that list and is cut by moto's own rules (Limit, the 1 MB
    page, LastEvaluatedKey from the last item). Anything unusual (a legacy
    QueryFilter, a start key not in the list) takes moto's path."""
    from moto.dynamodb.models.table import RESULT_SIZE_LIMIT, Table
    from moto.dynamodb.responses import DynamoHandler

    state = {"generation": 0, "cache": {}}
    dispatch = DynamoHandler.call_action

    def call_action(self):
        if self._get_action() not in READS:
            state["generation"] += 1
            state["cache"].clear()
        return dispatch(self)

    DynamoHandler.call_action = call_action

    query = Table.query

    def sort_key(attrs, values):
        return json.dumps([values.get(a) for a in attrs], sort_keys=True)

    def cached_query(self, hash_key, range_comparison, range_objs, limit, exclusive_start_key,
                     scan_index_forward, projection_expressions, index_name=None,
                     consistent_read=False, filter_expression=None, hash_key_conditions=None,
                     range_key_conditions=None, **filter_kwargs):
        key = None
        if index_name and not filter_kwargs:
            key = (
                id(self),
                state["generation"],
                index_name,
                repr(hash_key_conditions),
                repr(range_key_conditions),
                range_comparison,
                repr([r.to_json() for r in range_objs or []]),
                bool(scan_index_forward),
            )
        hit = state["cache"].get(key) if key else None
        if hit is not None and exclusive_start_key is not None:
            candidates, positions, attrs = hit
            at = positions.get(sort_key(attrs, exclusive_start_key))
            if at is not None:
                results, size = [], 0
                last = None
                for item in candidates[at + 1:]:
                    if len(results) == limit or size + item.size() > RESULT_SIZE_LIMIT:
                        last = self._get_last_evaluated_key(results[-1], index_name)
                        break
                    results.append(item)
                    size += item.size()
                scanned = len(results)
                results = copy.deepcopy(results)
                index = self.get_index(index_name)
                results = [index.project(r) for r in results]
                if filter_expression is not None:
                    results = [r for r in results if filter_expression.expr(r)]
                if projection_expressions:
                    results = [r.project(projection_expressions) for r in results]
                return results, scanned, last
        if key is None:
            return query(self, hash_key, range_comparison, range_objs, limit,
                         exclusive_start_key, scan_index_forward, projection_expressions,
                         index_name, consistent_read, filter_expression,
                         hash_key_conditions, range_key_conditions, **filter_kwargs)

        seen = {}
        sorted_items = self.sorted_items

        def capture(hash_attrs, range_attrs, items):
            ordered = sorted_items(hash_attrs, range_attrs, items)
            seen["items"] = list(ordered)
            seen["attrs"] = self._generate_attr_to_sort_by(hash_attrs, range_attrs)
            seen["range_attr"] = (
                range_key_conditions[-1][0] if range_key_conditions else None
            )
            return ordered

        self.sorted_items = capture
        try:
            answer = query(self, hash_key, range_comparison, range_objs, limit,
                           exclusive_start_key, scan_index_forward, projection_expressions,
                           index_name, consistent_read, filter_expression,
                           hash_key_conditions, range_key_conditions, **filter_kwargs)
        finally:
            del self.sorted_items
        if "items" in seen:
            items = seen["items"]
            if not scan_index_forward:
                items.reverse()
            if range_comparison:
                attr = seen["range_attr"] or range_attr_of(self, index_name)
                items = [
                    i for i in items
                    if attr and i.attrs.get(attr) is not None
                    and i.attrs[attr].compare(range_comparison, range_objs)
                ]
            attrs = seen["attrs"]
            positions = {
                sort_key(attrs, {a: i.attrs[a].to_json() for a in attrs if a in i.attrs}): n
                for n, i in enumerate(items)
            }
            state["cache"][key] = (items, positions, attrs)
        return answer

    def range_attr_of(table, index_name):
        index = table.get_index(index_name)
        ranges = [k["AttributeName"] for k in index.schema if k["KeyType"] == "RANGE"]
        return ranges[0] if ranges else None

    Table.query = cached_query


def main():
    fast_query_pages()
    index_pages_in_order()
    port = int(sys.argv[1])
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    app = DomainDispatcherApplication(create_backend_app)
    run_simple("127.0.0.1", port, app, threaded=False, request_handler=MotoRequestHandler)


main()
