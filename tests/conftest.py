"""Fixtures shared by the test modules: the suite's own model cache, tiny models (in memory
and saved), the bundled SmolLM2, one embedded Ray for the whole session, and a loopback S3
server. Heavy modules are imported inside the fixtures that need them; helpers live in
`helpers` and `tiny_models`."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

# Triton kernels run on CPU through Triton's interpreter in tests. It is read when triton is
# first imported (transformers imports it), so it must be set before anything imports it.
os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Slow tests first: with the suite split over workers (pytest-xdist, by file), the
    longest files start at once and the short ones fill in around them."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:  # another filesystem
        shutil.copy2(source, target)


@pytest.fixture(autouse=True, scope="session")
def temporary_model_cache(tmp_path_factory: pytest.TempPathFactory):
    """The suite's own model cache (``$MINKSCAN_CACHE``, inherited by every process, Ray
    worker and job the suite starts), so no test writes to the user's. Models the user's
    cache already holds are hard-linked in (read, never written) instead of dequantised
    again; the others are built there on first use."""
    from minkscan.models.names import default_cache_dir

    user_models = default_cache_dir() / "models"
    cache = tmp_path_factory.mktemp("minkscan-cache")
    if user_models.is_dir():
        shutil.copytree(user_models, cache / "models", copy_function=_link_or_copy,
                        ignore=shutil.ignore_patterns(".*"))  # fmt: skip
    previous = os.environ.get("MINKSCAN_CACHE")
    os.environ["MINKSCAN_CACHE"] = str(cache)
    yield cache
    if previous is None:
        os.environ.pop("MINKSCAN_CACHE", None)
    else:
        os.environ["MINKSCAN_CACHE"] = previous


@pytest.fixture(scope="session", params=["gpt2", "llama", "gemma3"])
def tiny_model(request: pytest.FixtureRequest):
    """Each tiny architecture in turn."""
    from tiny_models import build_tiny_model

    return build_tiny_model(request.param)


@pytest.fixture(scope="session")
def tiny_llama():
    from tiny_models import build_tiny_model

    return build_tiny_model("llama")


@pytest.fixture(scope="session")
def smollm2():
    """The real bundled SmolLM2-135M (float32, CPU), loaded once per test session."""
    from minkscan.config import ModelConfig
    from minkscan.models.loading import load_model

    return load_model(ModelConfig(name="smollm2-135m", device="cpu"))


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Llama saved with save_pretrained, for code that loads models by name (actors)."""
    from tiny_models import build_tiny_model

    directory = tmp_path_factory.mktemp("tiny-llama")
    loaded = build_tiny_model("llama")
    loaded.model.save_pretrained(directory)
    loaded.tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(scope="session")
def tiny_gpt2_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny GPT-2 saved to disk whose tokenizer differs from the tiny Llama's (no BOS, a
    smaller vocabulary): a reference model for Ref that must tokenise the text itself."""
    from tiny_models import build_tiny_model

    directory = tmp_path_factory.mktemp("tiny-gpt2")
    loaded = build_tiny_model("gpt2", seed=3, vocab_size=280)
    loaded.model.save_pretrained(directory)
    loaded.tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture
def s3_server(tmp_path_factory: pytest.TempPathFactory):
    """moto's S3 server on loopback (as s3fs's own tests run it, in a process of its own),
    with a fresh bucket."""
    import boto3
    from helpers import moto_s3

    with moto_s3(tmp_path_factory.mktemp("moto") / "moto.log") as endpoint:
        client = boto3.client(
            "s3",
            endpoint_url=endpoint,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        )
        client.create_bucket(Bucket="corpus")
        yield endpoint, client


@pytest.fixture
def s3_env(s3_server, monkeypatch):
    """moto's S3 (`s3_server`) as a user's environment names it: the AWS_* variables that
    minkscan, pyarrow and s3fs read, pointed at moto."""
    endpoint, client = s3_server
    for name, value in {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)  # fmt: skip
    return endpoint, client


# Logical CPUs of the session's Ray: a scoring actor, a reference actor, tokenizing, reading
# and committing tasks all fit (the 2-core machine shares its cores among them).
SESSION_CPUS = 5


@pytest.fixture(scope="session")
def _session_ray():
    import ray

    yield
    if ray.is_initialized():
        ray.shutdown()


@pytest.fixture
def local_ray(_session_ray):
    """One embedded Ray for every in-process pipeline run of the session (each would
    otherwise start its own); started again after a test that needed a Ray of its own."""
    import ray

    if not ray.is_initialized():
        ray.init(
            address="local", num_cpus=SESSION_CPUS, include_dashboard=False, log_to_driver=False
        )


@pytest.fixture(autouse=True, scope="session")
def stalled_pipelines_fail_fast():
    """An in-process run that stalls (say, actors holding every CPU) fails after 5 minutes
    of no progress instead of Ray Data's default half hour."""
    import ray

    context = ray.data.DataContext.get_current()
    previous = context.execution_no_progress_timeout_s
    context.execution_no_progress_timeout_s = 300
    yield
    context.execution_no_progress_timeout_s = previous


@pytest.fixture(params=["on the driver", "by Ray Data"])
def ids_counted(request, monkeypatch):
    """Both ways a run counts its ids: on the driver (small inputs, as in every test) and
    with a distributed group-by (large inputs), which a test can then pin to the same
    behaviour."""
    from minkscan.distributed import ids

    if request.param == "by Ray Data":
        monkeypatch.setattr(ids, "DRIVER_BYTES", -1)
    return request.param
