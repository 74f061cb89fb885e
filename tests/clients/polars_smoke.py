"""polars write_delta and read_delta through an S3 endpoint (tests/gateway_clients.rs):
two appends, then the table must read back as both. Settings as deltalake_race.py's."""

import os
import sys

import polars as pl

uri = sys.argv[1]
options = {
    "AWS_ENDPOINT_URL": os.environ["DYNACOMMIT_S3_ENDPOINT"],
    "AWS_ACCESS_KEY_ID": os.environ["DYNACOMMIT_S3_KEY"],
    "AWS_SECRET_ACCESS_KEY": os.environ["DYNACOMMIT_S3_SECRET"],
    "AWS_REGION": "us-east-1",
    "AWS_ALLOW_HTTP": "true",
}
pl.DataFrame({"id": [1, 2], "name": ["a", "b"]}).write_delta(uri, mode="append", storage_options=options)
pl.DataFrame({"id": [3], "name": ["c"]}).write_delta(uri, mode="append", storage_options=options)
back = pl.read_delta(uri, storage_options=options).sort("id")
if back["id"].to_list() != [1, 2, 3] or back["name"].to_list() != ["a", "b", "c"]:
    sys.exit(f"polars read back {back}")
print("polars: 2 appends, 3 rows read back")
