# One image for every role: `joulie --role=manager|agent|extender` (the manifests set the role).
#
# BASE is any image with Python >= 3.11 on it and the `venv` module with pip. The default is
# python:3.11-slim pinned by digest, so `docker build .` pulls the same bytes everywhere;
# hack/image/pin-base.sh replaces it with the digest of the tag's multi-platform index as
# Docker Hub serves it now (run it, rebuild, commit, to take the base's security updates).
# Without a registry, `make image` (hack/image/build.sh) makes a Debian root filesystem with
# mmdebstrap, imports it as localhost/joulie-base:... and passes it here with --build-arg BASE=...
# Both stages use the same BASE: the venv's interpreter is a link to the base's python3, so
# the final stage needs the very same python at the very same path.
ARG BASE=python:3.11-slim@sha256:9c900dea9e8fb7e16277c179b555cc72d29a352dbc33cff48ad5a0412fd5bfc7

FROM ${BASE} AS build
WORKDIR /src
# `pip install .` as README.md gives it (no extras: the plots extra's matplotlib is not for
# the roles), into a venv at a fixed path so the final stage copies one directory. The
# dependencies come from requirements-image.txt, the lock made from pyproject.toml by
# hack/image/lock.sh: exact versions, every file checked against its sha256, wheels only (no
# compiler needed). They are a layer of their own keyed on the lock alone, so a change to the
# code rebuilds only the small layer that installs joulie itself.
COPY requirements-image.txt ./
# numpy's wheel carries its own test suite (~17 MB) that nothing imports at run time. The .pyc
# files stay: the image runs as non-root, so Python could not write them at start-up.
RUN python3 -m venv /opt/joulie \
    && /opt/joulie/bin/python -m pip install --no-cache-dir --require-hashes --only-binary=:all: \
        -r requirements-image.txt \
    && find /opt/joulie -depth -type d -name tests -path '*/site-packages/numpy/*' -exec rm -rf {} +
COPY pyproject.toml README.md LICENSE ./
COPY joulie ./joulie
# The build requirements are in the lock, so joulie's wheel is built offline; pip check
# confirms the locked set satisfies pyproject.toml. Then pip, setuptools and wheel leave the
# venv: nothing in the image installs packages.
RUN /opt/joulie/bin/python -m pip install --no-cache-dir --no-deps --no-build-isolation /src \
    && /opt/joulie/bin/python -m pip check \
    && /opt/joulie/bin/python -m pip uninstall --yes pip setuptools wheel

FROM ${BASE}
COPY --from=build /opt/joulie /opt/joulie
ENV PATH=/opt/joulie/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# Non-root by default; only the node agent's DaemonSet runs it as root (sysfs writes).
USER 65532:65532
ENTRYPOINT ["joulie"]
CMD ["--help"]
