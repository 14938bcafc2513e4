"""``doctor``: what would stop a deployment or a job, found before anyone pays.

- ``doctor.aws``: the AWS account (region, zones, capacity reservations, quotas), boto3 with
  the user's credentials; ``Clients`` bundles the clients (tests hand in their own);
- ``doctor.local``: the stack's secrets (never decrypted), Docker buildx, the model on the Hub;
- ``doctor.preview``: the reservation check the Pulumi program runs at preview;
- ``doctor.checks``: ``Result``, the table and the JSON; ``doctor.cli``: ``main(argv) -> int``.
"""
