"""Checks infra/local/moto_serial.py's paged index Query against stock moto_server.

moto_serial serves a later page of an index Query from the sorted candidates it kept
for the first page; this starts both servers, writes the same items to each, and pages
the same Queries (Limit or the 1 MB cut, both directions, with and without a range
condition, and a write between two pages) on both in lockstep. Every page must match:
items, LastEvaluatedKey and Count. Exit 0 when they all do.

usage: moto_serial_check.py   (run with the virtualenv's python: moto, boto3)
"""
import os
import random
import socket
import subprocess
import sys
import time

import boto3


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_for(port):
    for _ in range(1200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"nothing listens on {port}")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    bindir = os.path.dirname(sys.executable)
    ours, stock = free_port(), free_port()
    servers = [
        subprocess.Popen([sys.executable, os.path.join(here, "moto_serial.py"), str(ours)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
        subprocess.Popen([os.path.join(bindir, "moto_server"), "-H", "127.0.0.1", "-p", str(stock)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
    ]
    try:
        for port in (ours, stock):
            wait_for(port)
        clients = [
            boto3.client("dynamodb", endpoint_url=f"http://127.0.0.1:{p}", region_name="us-east-1",
                         aws_access_key_id="x", aws_secret_access_key="x")
            for p in (ours, stock)
        ]
        for c in clients:
            c.create_table(
                TableName="t",
                KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
                AttributeDefinitions=[{"AttributeName": n, "AttributeType": t}
                                      for n, t in [("pk", "S"), ("sk", "S"), ("g", "S"), ("r", "N")]],
                GlobalSecondaryIndexes=[{
                    "IndexName": "by_g",
                    "KeySchema": [{"AttributeName": "g", "KeyType": "HASH"}, {"AttributeName": "r", "KeyType": "RANGE"}],
                    "Projection": {"ProjectionType": "ALL"},
                }],
                BillingMode="PAY_PER_REQUEST",
            )
        rnd = random.Random(7)
        written = [0]

        def put():
            i = written[0]
            written[0] += 1
            item = {"pk": {"S": f"p{rnd.randrange(50)}"}, "sk": {"S": f"s{i}"},
                    "g": {"S": f"g{rnd.randrange(3)}"}, "r": {"N": str(rnd.randrange(40))},
                    "v": {"S": "x" * rnd.randrange(30000)}}
            for c in clients:
                c.put_item(TableName="t", Item=item)

        for _ in range(600):
            put()
        cases = []
        for forward in (True, False):
            for limit in (None, 7, 50):
                cases.append((forward, limit, "g = :g", {":g": {"S": "g1"}}))
                cases.append((forward, limit, "g = :g AND r BETWEEN :a AND :b",
                              {":g": {"S": "g2"}, ":a": {"N": "5"}, ":b": {"N": "30"}}))
        pages = 0
        for forward, limit, cond, values in cases:
            starts = [None, None]
            n = 0
            while True:
                answers = []
                for i, c in enumerate(clients):
                    kw = dict(TableName="t", IndexName="by_g", KeyConditionExpression=cond,
                              ExpressionAttributeValues=values, ScanIndexForward=forward)
                    if limit:
                        kw["Limit"] = limit
                    if starts[i]:
                        kw["ExclusiveStartKey"] = starts[i]
                    r = c.query(**kw)
                    answers.append(([(x["pk"]["S"], x["sk"]["S"]) for x in r["Items"]],
                                    r.get("LastEvaluatedKey"), r["Count"]))
                    starts[i] = r.get("LastEvaluatedKey")
                if answers[0] != answers[1]:
                    sys.exit(f"page {n} of {cond} forward={forward} limit={limit} differs:\n"
                             f"ours  {answers[0][1]} {answers[0][2]}\nstock {answers[1][1]} {answers[1][2]}")
                n += 1
                pages += 1
                if n == 2:
                    # A write between pages: a cache kept past it would serve stale pages.
                    put()
                if not starts[0]:
                    break
        print(f"moto_serial pages like stock moto: {len(cases)} queries, {pages} pages")
    finally:
        for s in servers:
            s.terminate()
            s.wait()


main()
