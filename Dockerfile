# One image for every role: `joulie --role=manager|agent|extender` (the manifests set the role).
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY joulie ./joulie
# The same install as README.md's "Install" section, into a prefix copied to the final image.
RUN pip install --no-cache-dir --prefix=/install .

FROM python:3.11-slim
COPY --from=build /install /usr/local
# Non-root by default; only the node agent's DaemonSet runs it as root (sysfs writes).
USER 65532:65532
ENTRYPOINT ["joulie"]
CMD ["--help"]
