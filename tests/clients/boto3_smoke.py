"""boto3 through an S3 endpoint (tests/gateway_clients.rs): put-if-absent, a presigned
GET, a multipart upload, copies (plain and if-absent), a listing, and the bucket emptied
as boto3-based test suites empty buckets (ListObjectVersions). Exits non-zero, saying
what failed, if anything does not hold. Settings as deltalake_race.py's, and
DYNACOMMIT_S3_BUCKET."""

import os
import sys
import urllib.error
import urllib.request

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

endpoint = os.environ["DYNACOMMIT_S3_ENDPOINT"]
bucket = os.environ["DYNACOMMIT_S3_BUCKET"]
# boto3 presigns with SigV2 unless told otherwise; the gateway takes SigV4 only.
s3 = boto3.client(
    "s3",
    endpoint_url=endpoint,
    aws_access_key_id=os.environ["DYNACOMMIT_S3_KEY"],
    aws_secret_access_key=os.environ["DYNACOMMIT_S3_SECRET"],
    region_name="us-east-1",
    config=Config(signature_version="s3v4", retries={"max_attempts": 1}),
)


def expect(condition, what):
    if not condition:
        sys.exit(f"boto3 smoke: {what}")


def error_code(call):
    try:
        call()
    except ClientError as error:
        return error.response["Error"]["Code"], error.response["ResponseMetadata"]["HTTPStatusCode"]
    return None


# Put-if-absent: the first wins, the second is refused with S3's 412.
s3.put_object(Bucket=bucket, Key="boto3/log/0.json", Body=b"first", IfNoneMatch="*")
refused = error_code(lambda: s3.put_object(Bucket=bucket, Key="boto3/log/0.json", Body=b"second", IfNoneMatch="*"))
expect(refused == ("PreconditionFailed", 412), f"a second create answered {refused}")
body = s3.get_object(Bucket=bucket, Key="boto3/log/0.json")["Body"].read()
expect(body == b"first", f"the create was overwritten: {body!r}")

# Compare-and-swap on the ETag.
etag = s3.head_object(Bucket=bucket, Key="boto3/log/0.json")["ETag"]
s3.put_object(Bucket=bucket, Key="boto3/log/0.json", Body=b"swapped", IfMatch=etag)
stale = error_code(lambda: s3.put_object(Bucket=bucket, Key="boto3/log/0.json", Body=b"stale", IfMatch=etag))
expect(stale == ("PreconditionFailed", 412), f"a swap on a stale ETag answered {stale}")

# A presigned GET, with no credentials of its own.
url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "boto3/log/0.json"}, ExpiresIn=60)
expect(urllib.request.urlopen(url).read() == b"swapped", "the presigned GET read something else")

# A multipart upload of two parts (the first at S3's 5 MiB minimum).
parts = [b"a" * (5 << 20), b"b" * 1000]
upload = s3.create_multipart_upload(Bucket=bucket, Key="boto3/data/big.bin")
done = []
for number, part in enumerate(parts, start=1):
    answer = s3.upload_part(Bucket=bucket, Key="boto3/data/big.bin", UploadId=upload["UploadId"], PartNumber=number, Body=part)
    done.append({"PartNumber": number, "ETag": answer["ETag"]})
s3.complete_multipart_upload(Bucket=bucket, Key="boto3/data/big.bin", UploadId=upload["UploadId"], MultipartUpload={"Parts": done})
got = s3.get_object(Bucket=bucket, Key="boto3/data/big.bin")["Body"].read()
expect(got == b"".join(parts), f"the multipart upload read back {len(got)} bytes")

# A copy, then a copy-if-absent onto it (If-None-Match: *, added to the request as S3's
# conditional copy carries it), which must be refused.
s3.copy_object(Bucket=bucket, Key="boto3/data/copy.bin", CopySource={"Bucket": bucket, "Key": "boto3/log/0.json"})
expect(s3.get_object(Bucket=bucket, Key="boto3/data/copy.bin")["Body"].read() == b"swapped", "the copy differs")


def if_none_match(request, **_):
    request.headers["If-None-Match"] = "*"


s3.meta.events.register("before-sign.s3.CopyObject", if_none_match)
copied = error_code(lambda: s3.copy_object(Bucket=bucket, Key="boto3/data/copy.bin", CopySource={"Bucket": bucket, "Key": "boto3/data/big.bin"}))
expect(copied == ("PreconditionFailed", 412), f"a copy-if-absent onto an object answered {copied}")
s3.meta.events.unregister("before-sign.s3.CopyObject", if_none_match)

keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="boto3/")["Contents"])
expect(keys == ["boto3/data/big.bin", "boto3/data/copy.bin", "boto3/log/0.json"], f"listed {keys}")

# What boto3-based suites do to clean up: delete every object version.
boto3.resource(
    "s3",
    endpoint_url=endpoint,
    aws_access_key_id=os.environ["DYNACOMMIT_S3_KEY"],
    aws_secret_access_key=os.environ["DYNACOMMIT_S3_SECRET"],
    region_name="us-east-1",
).Bucket(bucket).object_versions.delete()
expect(s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0, "objects left after the clean-up")
print("boto3: put-if-absent, swap, presigned GET, multipart, copies, listing, clean-up")
