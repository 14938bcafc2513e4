"""S3 as a place for checkpoints, exports and weights (docs/s3.md, docs/adr/0011).

- `training.s3.uri`: `s3://bucket/prefix` locations, checked without any AWS library;
- `training.s3.client`: the boto3 client from the standard AWS variables (endpoint, region,
  credentials chain) and its errors in one line;
- `training.s3.check`: the start-up check that every `s3://` flag is usable;
- `training.s3.dcp`: torch.distributed.checkpoint's storage writer and reader on S3;
- `training.s3.checkpoints`: complete, newest and prunable checkpoints under an S3 prefix;
- `training.s3.transfer`: folder upload (exports, run outputs) and download (weights).

Importing this package imports nothing heavier than the standard library.
"""
