# purgekeeper's image: the runtime dependencies only (no dev tools), as a non-root user.
# `docker build -t purgekeeper .`; compose.yaml runs it as api, worker and scheduler.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PURGEKEEPER_DATA_DIR=/var/lib/purgekeeper

# git: a bot's Memory repository is a Git working tree
RUN apt-get update \
    && apt-get install -y --no-install-recommends git \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --create-home --home-dir /home/purgekeeper purgekeeper \
    && mkdir -p /var/lib/purgekeeper \
    && chown purgekeeper /var/lib/purgekeeper

WORKDIR /app

# The dependencies first, from pyproject.toml alone, so this layer is rebuilt only when they
# change: install a stub of the package (its name and version, no code), then drop the stub.
COPY pyproject.toml README.md LICENSE ./
RUN mkdir -p purgekeeper \
    && echo '__version__ = "0"' > purgekeeper/__init__.py \
    && pip install . \
    && pip uninstall -y purgekeeper \
    && rm -rf purgekeeper build *.egg-info

# Then the source (.dockerignore keeps .venv, .git, data, tokens and test output out).
COPY . .
RUN pip install --no-deps . && rm -rf build *.egg-info

USER purgekeeper
VOLUME ["/var/lib/purgekeeper"]
EXPOSE 8080

# purgectl health --quick: the schema is current, the ledger's head agrees with its copy, the
# gate is open, and the checkpoint directory can be written (exit 4 otherwise); O(1), where
# `purgectl health` walks the whole ledger. The services of compose.yaml use the same check.
HEALTHCHECK --interval=30s --timeout=20s --start-period=20s --retries=3 CMD ["purgectl", "health", "--quick"]

# Bound to every interface inside the container: set PURGEKEEPER_API_TOKEN (serve binds to
# loopback only when it has to generate the token itself). Run `purgectl init` first.
CMD ["purgectl", "serve", "--host", "0.0.0.0", "--port", "8080"]
