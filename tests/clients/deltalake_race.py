"""Python deltalake (delta-rs's bindings, its default S3 log store: If-None-Match alone)
appending to one table, as tests/gateway_clients.rs runs it.

    python deltalake_race.py create URI          make the table (version 0, no rows)
    python deltalake_race.py append URI W N      append N rows as writer W; print each
                                                 acknowledged append as a JSON line
    python deltalake_race.py check URI           print {"version": V, "rows": [[W, I], ...]}

The S3 settings come from the environment: DYNACOMMIT_S3_ENDPOINT, DYNACOMMIT_S3_KEY,
DYNACOMMIT_S3_SECRET.
"""

import json
import os
import sys

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

SCHEMA = pa.schema([("writer", pa.int64()), ("seq", pa.int64())])


def storage_options():
    return {
        "AWS_ENDPOINT_URL": os.environ["DYNACOMMIT_S3_ENDPOINT"],
        "AWS_ACCESS_KEY_ID": os.environ["DYNACOMMIT_S3_KEY"],
        "AWS_SECRET_ACCESS_KEY": os.environ["DYNACOMMIT_S3_SECRET"],
        "AWS_REGION": "us-east-1",
        "AWS_ALLOW_HTTP": "true",
    }


def main():
    command, uri = sys.argv[1], sys.argv[2]
    if command == "create":
        write_deltalake(uri, SCHEMA.empty_table(), mode="append", storage_options=storage_options())
    elif command == "append":
        writer, count = int(sys.argv[3]), int(sys.argv[4])
        for seq in range(count):
            rows = pa.table({"writer": [writer], "seq": [seq]}, schema=SCHEMA)
            # delta-rs retries a commit that meets a rival's version itself; an exception
            # here is an append not acknowledged (and not counted).
            try:
                write_deltalake(uri, rows, mode="append", storage_options=storage_options())
            except Exception as error:  # noqa: BLE001 - any failure is "not acknowledged"
                print(json.dumps({"writer": writer, "seq": seq, "error": str(error)[:300]}), flush=True)
                continue
            print(json.dumps({"writer": writer, "seq": seq}), flush=True)
    elif command == "check":
        table = DeltaTable(uri, storage_options=storage_options())
        data = table.to_pyarrow_table()
        rows = sorted(zip(data.column("writer").to_pylist(), data.column("seq").to_pylist()))
        print(json.dumps({"version": table.version(), "rows": rows}), flush=True)
    else:
        sys.exit(f"unknown command {command!r}: use create, append or check")


if __name__ == "__main__":
    main()
    # deltalake's native threads can abort the interpreter's teardown ("terminate called
    # without an active exception", seen on reads here): everything is printed, so leave
    # without one.
    sys.stdout.flush()
    os._exit(0)
