"""``TrainingImage``: an ECR repository and the training image built and pushed into it.

Built with pulumi-docker-build from ``training/Dockerfile`` (context: the repository root,
trimmed by ``training/.dockerignore``), for linux/amd64, tagged with the content hash of every
file that goes into the image (``workloads.specs.image.content_tag``): an unchanged tree pushes
nothing new and a pod never runs a stale ``latest``. The exported reference carries the digest.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pulumi
import pulumi_aws as aws
import pulumi_docker_build as docker_build

from infra import versions
from workloads.specs.image import DOCKERFILE, REPO_ROOT, build_args, content_tag

TYPE_TOKEN = "eks-fsdp:workloads:TrainingImage"


@dataclass(frozen=True, kw_only=True)
class TrainingImageArgs:
    """Arguments of ``TrainingImage``."""

    repository_name: str = versions.TRAINING_IMAGE_REPOSITORY
    """ECR repository name."""
    context: Path = REPO_ROOT
    """Build context (the repository root)."""
    dockerfile: str = DOCKERFILE
    """Dockerfile path relative to the context."""
    tag: str = ""
    """Image tag; empty = the content hash of the context's image files."""

    def __post_init__(self) -> None:
        if not (self.context / self.dockerfile).is_file():
            raise ValueError(
                f"TrainingImageArgs.dockerfile: {self.context / self.dockerfile} missing"
            )
        if self.tag == "latest":
            raise ValueError("TrainingImageArgs.tag: never 'latest'")


class TrainingImage(pulumi.ComponentResource):
    """ECR repository (immutable tags, scan on push) + the built, pushed image."""

    image_ref: pulumi.Output[str]
    """``<account>.dkr.ecr.<region>.amazonaws.com/<repo>:<tag>`` (``@sha256:...`` once pushed)."""
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
            image_tag_mutability="IMMUTABLE",
            image_scanning_configuration={"scan_on_push": True},
            force_delete=False,
            opts=child,
        )
        auth = aws.ecr.get_authorization_token_output(registry_id=self.repository.registry_id)
        tagged = self.repository.repository_url.apply(
            lambda url: f"{url or args.repository_name}:{self.tag}"
        )
        self.image = docker_build.Image(
            f"{name}-image",
            context=docker_build.BuildContextArgs(location=str(args.context)),
            dockerfile=docker_build.DockerfileArgs(location=str(args.context / args.dockerfile)),
            build_args=build_args(),
            platforms=[docker_build.Platform.LINUX_AMD64],
            push=True,
            tags=[tagged],
            registries=[
                docker_build.RegistryArgs(
                    address=self.repository.repository_url,
                    username=auth.user_name,
                    password=auth.password,
                )
            ],
            opts=child,
        )
        self.image_ref = pulumi.Output.all(tagged, self.image.ref).apply(
            lambda refs: refs[1] or refs[0]
        )
        self.register_outputs({"image_ref": self.image_ref, "tag": self.tag})
