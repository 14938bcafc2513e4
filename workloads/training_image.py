"""``TrainingImage``: the stack's ECR repository and the training image built and pushed into it.

- **One repository per stack** (``<project>-<stack>-training``, ``workloads.specs.image``), so
  two stacks in one account never collide; tags are immutable except the registry cache's
  (``IMMUTABLE_WITH_EXCLUSION``, filter ``buildcache*``); scan on push; a lifecycle policy keeps
  the newest :data:`KEEP_IMAGES` content-tagged images and expires untagged ones after a day.
- **The tag changes exactly when the image does**: ``content_tag`` hashes the build context the
  way pulumi-docker-build does (modes included) plus the build arguments, so the provider
  rebuilds only under a new tag.
- **Skip when the tag exists**: pulumi-docker-build 0.0.22 has no "push unless present" option,
  so the component looks the tag up first (``aws.ecr.get_image``, a plain read). Present (pushed
  by an earlier ``up``, another machine, or a lost state): no ``Image`` resource, the job runs
  ``<repo>:<tag>@<digest>`` as it is in the registry, and an IMMUTABLE push can never fail.
  Absent: build and push. The ``Image`` resource is ``retain_on_delete``, so dropping it from
  the program once the tag exists never touches the registry.
- **Destroy**: the repository is ``force_delete=False`` and ECR refuses to delete one that holds
  images, so a ``destroy`` empties it first (the scaling sweep does: ``sweeps/cloud.py``
  ``empty_repository``).
- **No build on preview** (``buildOnPreview: false``; the provider's default builds), and a
  BuildKit **registry cache** (``<repo>:buildcache``, mode max, image manifest as ECR needs).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pulumi
import pulumi_aws as aws
import pulumi_docker_build as docker_build

from workloads.specs.image import (
    CACHE_TAG,
    DOCKERFILE,
    PLATFORM,
    REPO_ROOT,
    TAG_PREFIX,
    build_args,
    content_tag,
)

TYPE_TOKEN = "eks-fsdp:workloads:TrainingImage"
KEEP_IMAGES = 20
"""Content-tagged images the lifecycle policy keeps (older ones expire; running jobs pin one)."""
UNTAGGED_DAYS = 1
"""Days an untagged image (an overwritten cache manifest, a failed push) is kept."""


def lifecycle_policy(keep: int = KEEP_IMAGES, untagged_days: int = UNTAGGED_DAYS) -> str:
    """The repository's lifecycle policy (ECR JSON): expire untagged images, keep the newest
    ``keep`` ``sha-`` images; the ``buildcache`` tag matches neither rule and stays."""
    return json.dumps(
        {
            "rules": [
                {
                    "rulePriority": 1,
                    "description": f"untagged images after {untagged_days} day(s)",
                    "selection": {
                        "tagStatus": "untagged",
                        "countType": "sinceImagePushed",
                        "countUnit": "days",
                        "countNumber": untagged_days,
                    },
                    "action": {"type": "expire"},
                },
                {
                    "rulePriority": 2,
                    "description": f"keep the newest {keep} content-tagged images",
                    "selection": {
                        "tagStatus": "tagged",
                        "tagPrefixList": [TAG_PREFIX],
                        "countType": "imageCountMoreThan",
                        "countNumber": keep,
                    },
                    "action": {"type": "expire"},
                },
            ]
        }
    )


ABSENT_ERRORS = ("RepositoryNotFoundException", "ImageNotFoundException")
"""ECR's error codes for "no such repository" and "no such tag" (``DescribeImages``, which the
provider's ``aws_ecr_image`` data source calls): the only failures that mean "not pushed yet"."""


def existing_digest(
    repository: str, tag: str, opts: pulumi.InvokeOptions | None = None
) -> str | None:
    """The digest of ``repository:tag`` in ECR, or None (no repository yet, no such tag).

    Any other failure (throttling, missing permissions, an unreachable endpoint) fails the
    program: read as "absent", it would rebuild and push a tag that may exist, and an IMMUTABLE
    repository refuses the push."""
    try:
        found = aws.ecr.get_image(repository_name=repository, image_tag=tag, opts=opts)
    except Exception as err:  # a failed invoke raises a plain Exception with the provider's text
        if any(code in str(err) for code in ABSENT_ERRORS):
            return None
        raise
    return found.image_digest or None


@dataclass(frozen=True, kw_only=True)
class TrainingImageArgs:
    """Arguments of ``TrainingImage``."""

    repository_name: str
    """ECR repository name (``workloads.specs.image.repository_name(project, stack)``)."""
    context: Path = REPO_ROOT
    """Build context (the repository root)."""
    dockerfile: str = DOCKERFILE
    """Dockerfile path relative to the context."""
    tag: str = ""
    """Image tag; empty = ``content_tag`` of the context and build arguments."""
    skip_existing: bool = True
    """Look the tag up first and reuse the pushed image instead of building."""

    def __post_init__(self) -> None:
        if not (self.context / self.dockerfile).is_file():
            raise ValueError(
                f"TrainingImageArgs.dockerfile: {self.context / self.dockerfile} missing"
            )
        if self.tag == "latest" or self.tag.startswith(CACHE_TAG):
            raise ValueError(f"TrainingImageArgs.tag: {self.tag!r} is not an image tag")
        if not self.repository_name:
            raise ValueError("TrainingImageArgs.repository_name: empty")


class TrainingImage(pulumi.ComponentResource):
    """The stack's ECR repository, its lifecycle policy, and the image (built unless present)."""

    image_ref: pulumi.Output[str]
    """``<account>.dkr.ecr.<region>.amazonaws.com/<repo>:<tag>@sha256:...``."""
    repository_url: pulumi.Output[str]
    """The repository's URL (the registry the job pulls from)."""
    tag: str
    """The content tag."""

    def __init__(
        self, name: str, args: TrainingImageArgs, opts: pulumi.ResourceOptions | None = None
    ):
        super().__init__(TYPE_TOKEN, name, {}, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.tag = args.tag or content_tag(args.context)
        self.repository = aws.ecr.Repository(
            f"{name}-repo",
            name=args.repository_name,
            image_tag_mutability="IMMUTABLE_WITH_EXCLUSION",
            image_tag_mutability_exclusion_filters=[
                aws.ecr.RepositoryImageTagMutabilityExclusionFilterArgs(
                    filter=f"{CACHE_TAG}*", filter_type="WILDCARD"
                )
            ],
            image_scanning_configuration={"scan_on_push": True},
            force_delete=False,
            opts=child,
        )
        self.lifecycle = aws.ecr.LifecyclePolicy(
            f"{name}-lifecycle",
            repository=self.repository.name,
            policy=lifecycle_policy(),
            opts=child,
        )
        self.repository_url = self.repository.repository_url
        tagged = self.repository_url.apply(lambda url: f"{url}:{self.tag}")
        digest = (
            existing_digest(args.repository_name, self.tag, pulumi.InvokeOptions(parent=self))
            if args.skip_existing
            else None
        )
        self.image: docker_build.Image | None = None
        if digest is not None:
            pulumi.log.info(f"{args.repository_name}:{self.tag} is in ECR ({digest}): no build")
            self.image_ref = tagged.apply(lambda ref: f"{ref}@{digest}")
        else:
            self.image = self._build(name, args, tagged)
            self.image_ref = pulumi.Output.all(tagged, self.image.digest).apply(
                lambda refs: f"{refs[0]}@{refs[1]}" if refs[1] else refs[0]
            )
        self.register_outputs(
            {"image_ref": self.image_ref, "tag": self.tag, "repository_url": self.repository_url}
        )

    def _build(
        self, name: str, args: TrainingImageArgs, tagged: pulumi.Output[str]
    ) -> docker_build.Image:
        auth = aws.ecr.get_authorization_token_output(registry_id=self.repository.registry_id)
        cache = self.repository_url.apply(lambda url: f"{url}:{CACHE_TAG}")
        return docker_build.Image(
            f"{name}-image",
            context=docker_build.BuildContextArgs(location=str(args.context)),
            dockerfile=docker_build.DockerfileArgs(location=str(args.context / args.dockerfile)),
            build_args=build_args(),
            platforms=[docker_build.Platform(PLATFORM)],
            push=True,
            build_on_preview=False,
            tags=[tagged],
            labels={"org.opencontainers.image.version": self.tag},
            cache_from=[
                docker_build.CacheFromArgs(registry=docker_build.CacheFromRegistryArgs(ref=cache))
            ],
            cache_to=[
                docker_build.CacheToArgs(
                    registry=docker_build.CacheToRegistryArgs(
                        ref=cache,
                        mode=docker_build.CacheMode.MAX,
                        image_manifest=True,
                        oci_media_types=True,
                        ignore_error=True,
                    )
                )
            ],
            registries=[
                docker_build.RegistryArgs(
                    address=self.repository_url,
                    username=auth.user_name,
                    password=auth.password,
                )
            ],
            opts=pulumi.ResourceOptions(parent=self, retain_on_delete=True),
        )
