"""What went wrong in an AWS call, told apart, each with its own fix.

A failed call is one of six kinds, read from botocore's exception and the error code AWS sent:

- ``credentials``: no credentials, or ones AWS does not accept (botocore's
  ``NoCredentialsError`` and friends; EC2's ``AuthFailure``, ``InvalidClientTokenId``,
  ``IncompleteSignature``, ``MissingAuthenticationToken``, ``RequestExpired``: EC2 API
  Reference, "Error codes for the Amazon EC2 API", common client errors; ``ExpiredToken`` /
  ``UnrecognizedClientException`` of the JSON services);
- ``denied``: valid credentials, no permission (EC2's ``UnauthorizedOperation``, "Troubleshooting
  API request errors"; ``AccessDenied`` / ``AccessDeniedException``; ``Blocked``,
  ``OptInRequired``, ``PendingVerification`` for an account not allowed to use the service);
- ``not-found``: what the call names does not exist (``*.NotFound``, ``*.Malformed`` ids,
  Service Quotas' ``NoSuchResourceException``);
- ``throttled``: botocore's own list of throttling codes (``botocore/retries/standard.py``
  ``ThrottledRetryableChecker._THROTTLED_ERROR_CODES``, botocore 1.44) or HTTP 429;
- ``unavailable``: no answer, or AWS's side failed (botocore ``ConnectionError`` /
  ``HTTPClientError``; ``TransientRetryableChecker``'s codes and HTTP 500/502/503/504; EC2's
  server errors ``InternalError``, ``ServerInternal``, ``Unavailable``; Service Quotas'
  ``ServiceException``);
- ``unexpected``: an answer that is not the service's API: a body botocore cannot parse
  (``botocore.parsers.ResponseParserError``, e.g. an HTML error page, or the 500 page of an
  endpoint that does not implement the call), a reply without the fields the service model
  promises, or a code nobody expects here (``InvalidAction``: the endpoint does not know the
  call).

botocore is imported inside functions: ``doctor.aws`` imports this module at no cost.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

CREDENTIALS = "credentials"
DENIED = "denied"
NOT_FOUND = "not-found"
THROTTLED = "throttled"
UNAVAILABLE = "unavailable"
UNEXPECTED = "unexpected"
KINDS = (CREDENTIALS, DENIED, NOT_FOUND, THROTTLED, UNAVAILABLE, UNEXPECTED)

CREDENTIAL_CODES = frozenset(
    {
        "AuthFailure",
        "InvalidClientTokenId",
        "IncompleteSignature",
        "MissingAuthenticationToken",
        "SignatureDoesNotMatch",
        "RequestExpired",
        "ExpiredToken",
        "ExpiredTokenException",
        "UnrecognizedClientException",
        "InvalidAccessKeyId",
    }
)
CREDENTIAL_CLASSES = (
    "NoCredentialsError",
    "PartialCredentialsError",
    "CredentialRetrievalError",
    "NoAuthTokenError",
    "SSOTokenLoadError",
    "UnauthorizedSSOTokenError",
    "TokenRetrievalError",
    "ProfileNotFound",
)
"""botocore.exceptions classes (``BotoCoreError``s, raised before or without a response)."""
DENIED_CODES = frozenset(
    {
        "UnauthorizedOperation",
        "AccessDenied",
        "AccessDeniedException",
        "Blocked",
        "OptInRequired",
        "PendingVerification",
    }
)
NOT_FOUND_CODES = frozenset(
    {"NoSuchResourceException", "NoSuchEntity", "ResourceNotFoundException"}
)
THROTTLED_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottledException",
        "TooManyRequestsException",
        "ProvisionedThroughputExceededException",
        "TransactionInProgressException",
        "RequestLimitExceeded",
        "BandwidthLimitExceeded",
        "LimitExceededException",
        "RequestThrottled",
        "SlowDown",
        "PriorRequestNotComplete",
        "EC2ThrottledException",
    }
)
"""botocore 1.44 ``retries/standard.py`` ``_THROTTLED_ERROR_CODES`` (a test keeps this a
superset of the installed botocore's list)."""
UNAVAILABLE_CODES = frozenset(
    {
        "RequestTimeout",
        "RequestTimeoutException",
        "InternalError",
        "InternalFailure",
        "ServerInternal",
        "ServiceException",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "Unavailable",
    }
)
"""botocore's transient codes (``_TRANSIENT_ERROR_CODES``) and the services' server errors."""
UNAVAILABLE_STATUS = frozenset({500, 502, 503, 504})
"""botocore ``TransientRetryableChecker._TRANSIENT_STATUS_CODES``."""


@dataclass(frozen=True)
class AwsError:
    """A failed AWS call: its kind (``KINDS``), the code AWS (or botocore) gave, the message."""

    kind: str
    code: str
    message: str
    status: int | None = None
    """The HTTP status when a response came back."""

    def detail(self) -> str:
        """``Code: message`` on one line (with the HTTP status when the code does not say it)."""
        http = f" (HTTP {self.status})" if self.status and str(self.status) != self.code else ""
        first = self.message.strip().splitlines()[0] if self.message.strip() else ""
        return f"{self.code}{http}: {first}" if first else f"{self.code}{http}"


class UnexpectedResponse(Exception):
    """A reply without a field the service model promises (``field``)."""


def field(response: Mapping[str, Any], key: str, call: str) -> Any:
    """``response[key]``, or ``UnexpectedResponse`` naming the call when the reply lacks it (an
    endpoint that answers 200 with an HTML page parses to a reply of metadata only)."""
    if not isinstance(response, Mapping) or key not in response:
        raise UnexpectedResponse(f"{call} answered without {key}")
    return response[key]


def api_errors() -> tuple[type[Exception], ...]:
    """What a call raises when AWS (or an endpoint standing in for it) answers badly: botocore's
    own errors, ``ResponseParserError`` (botocore ``parsers.py``: a plain ``Exception``) and a
    reply lacking its fields (``UnexpectedResponse``)."""
    import botocore.exceptions
    import botocore.parsers

    return (
        botocore.exceptions.BotoCoreError,
        botocore.exceptions.ClientError,
        botocore.parsers.ResponseParserError,
        UnexpectedResponse,
    )


def classify(err: Exception) -> AwsError:
    """The kind of ``err`` (one of ``api_errors()``), its code and message."""
    import botocore.exceptions
    import botocore.parsers

    name = type(err).__name__
    text = str(err)
    if isinstance(err, UnexpectedResponse):
        return AwsError(UNEXPECTED, "UnexpectedResponse", text)
    if isinstance(err, botocore.parsers.ResponseParserError):
        return AwsError(UNEXPECTED, name, "the reply is not the service's XML or JSON")
    response = getattr(err, "response", None)
    if isinstance(err, botocore.exceptions.ClientError) and isinstance(response, Mapping):
        error = response.get("Error") or {}
        meta = response.get("ResponseMetadata") or {}
        status = meta.get("HTTPStatusCode")
        code = str(error.get("Code") or "Unknown")
        message = str(error.get("Message") or "")
        return AwsError(_kind(code, status), code, message, status)
    if name in CREDENTIAL_CLASSES:
        return AwsError(CREDENTIALS, name, text)
    if isinstance(err, botocore.exceptions.ConnectionError | botocore.exceptions.HTTPClientError):
        return AwsError(UNAVAILABLE, name, text)
    return AwsError(UNEXPECTED, name, text)


def _kind(code: str, status: int | None) -> str:
    if code in CREDENTIAL_CODES:
        return CREDENTIALS
    if code in DENIED_CODES:
        return DENIED
    if code in NOT_FOUND_CODES or code.endswith((".NotFound", ".Malformed")):
        return NOT_FOUND
    if code in THROTTLED_CODES or status == 429:
        return THROTTLED
    if code in UNAVAILABLE_CODES or status in UNAVAILABLE_STATUS:
        return UNAVAILABLE
    return UNEXPECTED


def fix(error: AwsError, action: str, *, not_found: str | None = None) -> str:
    """One line for ``error`` of the call that needs IAM ``action`` (``ec2:DescribeVpcs``);
    ``not_found``: what to do when the thing named does not exist."""
    if error.kind == CREDENTIALS:
        return (
            "the AWS credentials are missing, expired or not accepted: aws sts "
            "get-caller-identity shows which (aws sso login, or export AWS_PROFILE=...)"
        )
    if error.kind == DENIED:
        return f"allow {action} for this principal (docs/iam-policy.json has what a deploy needs)"
    if error.kind == NOT_FOUND:
        return not_found or f"{action}: what it names does not exist in this account and region"
    if error.kind == THROTTLED:
        return (
            "AWS throttled this account's API calls: run doctor again in a minute "
            "(AWS_RETRY_MODE=adaptive AWS_MAX_ATTEMPTS=10 retries longer)"
        )
    if error.kind == UNAVAILABLE:
        return (
            f"{action.partition(':')[0]} did not answer: check the network, any proxy and "
            "AWS_ENDPOINT_URL*, then run doctor again"
        )
    return (
        f"the answer to {action} is not AWS's: check AWS_ENDPOINT_URL / AWS_ENDPOINT_URL_"
        f"{_env_suffix(action)} (unset them for AWS itself) and any proxy"
    )


def _env_suffix(action: str) -> str:
    """``ec2:X`` -> ``EC2``, ``servicequotas:X`` -> ``SERVICE_QUOTAS`` (boto3 guide,
    "Service-specific endpoints": the service id, upper case, spaces to underscores)."""
    service = action.partition(":")[0]
    return {"servicequotas": "SERVICE_QUOTAS"}.get(service, service.upper())


__all__ = [
    "CREDENTIALS",
    "DENIED",
    "KINDS",
    "NOT_FOUND",
    "THROTTLED",
    "UNAVAILABLE",
    "UNEXPECTED",
    "AwsError",
    "UnexpectedResponse",
    "api_errors",
    "classify",
    "field",
    "fix",
]
