# One image for every role: `joulie --role=manager|agent|extender` (the manifests set the role).
#
# BASE is any image with Python >= 3.11 on it and the `venv` module with pip. The default pulls
# python:3.11-slim, so `docker build .` works wherever a registry is reachable. Without a
# registry, `make image` (hack/image/build.sh) makes a Debian root filesystem with mmdebstrap,
# imports it as localhost/joulie-base:... and passes it here with --build-arg BASE=...
# Both stages use the same BASE: the venv's interpreter is a link to the base's python3, so
# the final stage needs the very same python at the very same path.
ARG BASE=python:3.11-slim

FROM ${BASE} AS build
WORKDIR /src
# The same install as README.md's "Install" section (no dev extras), into a venv at a fixed
# path so the final stage copies one directory. Only wheels are installed, so no compiler is
# needed. The dependencies come first, in a layer of their own keyed on pyproject.toml alone,
# so a change to the code rebuilds only the small layer that installs joulie itself.
COPY pyproject.toml ./
# numpy's wheel carries its own test suite (~17 MB) that nothing imports at run time. The .pyc
# files stay: the image runs as non-root, so Python could not write them at start-up.
RUN python3 -m venv /opt/joulie \
    && python3 -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb")); print("\n".join(p["build-system"]["requires"] + p["project"]["dependencies"]))' >/tmp/requirements.txt \
    && /opt/joulie/bin/python -m pip install --no-cache-dir -r /tmp/requirements.txt \
    && find /opt/joulie -depth -type d -name tests -path '*/site-packages/numpy/*' -exec rm -rf {} +
COPY README.md ./
COPY joulie ./joulie
# The build requirements are already in the venv, so joulie's wheel is built offline; pip check
# confirms the dependency layer still satisfies pyproject.toml. Then pip, setuptools and wheel
# leave the venv: nothing in the image installs packages.
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
