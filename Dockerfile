# The fabricwatch image the Kubernetes manifests in deploy/kubernetes name: our wheel, built from
# this repository, on Python 3.11, run as an unprivileged user (uid 10001, as the manifests'
# securityContext says). Build and push: docs/deploy.md.
FROM python:3.11-slim AS wheel
WORKDIR /src
COPY . .
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /dist .

FROM python:3.11-slim
RUN useradd --system --uid 10001 --user-group --home-dir /var/lib/fabricwatch --create-home fabricwatch
COPY --from=wheel /dist/ /tmp/dist/
RUN pip install --no-cache-dir /tmp/dist/*.whl && rm -rf /tmp/dist
USER 10001
WORKDIR /var/lib/fabricwatch
ENTRYPOINT ["fabricwatch"]
CMD ["--help"]
