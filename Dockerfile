# The Flotilla worker image, in three stages: `deps` installs the runtime dependencies alone,
# `build` compiles dist/ (the TypeScript and the workflow bundles) with the dev dependencies, and
# the image itself holds those two results, bin/ and the system packages sandboxes need. No
# TypeScript toolchain ships, and a container starts without touching the network or a checkout.
# test/e2e/image.test.ts builds these stages step by step without a Docker engine and runs the
# entrypoint.
#
# The worker runs as root, which gives each sandbox a uid of its own, cgroups where they are
# writable, and mounts; agents never run as root: each runs under bubblewrap as its sandbox's uid,
# with no capabilities. So the container needs (docker-compose.yml asks for it; docs/operations.md,
# "Docker and docker-compose", says why, and the `docker run` options):
#   - CAP_SYS_ADMIN, and seccomp and AppArmor that allow unshare and mount (the prelude, bubblewrap);
#   - an unmasked /proc (systempaths=unconfined), for the fresh /proc each sandbox mounts;
#   - a host kernel that allows unprivileged user namespaces (Debian: kernel.unprivileged_userns_clone=1;
#     Ubuntu 24.04+: kernel.apparmor_restrict_unprivileged_userns=0).
# FLOTILLA_REQUIRE_ISOLATION=1 makes the worker refuse to start when bubblewrap cannot isolate.

FROM node:20-bookworm-slim AS deps
WORKDIR /app
COPY package.json package-lock.json ./
# No install scripts (as npm 11 does by default): nothing Flotilla uses needs them.
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund

FROM node:20-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY scripts/bundle-workflows.js ./scripts/
COPY src ./src
RUN npm run build

FROM node:20-bookworm-slim
# git for workspaces, bubblewrap for sandboxes, util-linux and mount for the root prelude
# (unshare, setpriv, mount), tini to reap agents' orphans as PID 1, procps for the agents' own
# tooling. Versions come from the base image's Debian release (its security updates included),
# not pins that go stale.
# hadolint ignore=DL3008
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      bubblewrap ca-certificates git mount openssh-client procps tini util-linux \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY package.json ./
COPY --from=deps /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY bin ./bin

ENV NODE_ENV=production FLOTILLA_HOME=/data FLOTILLA_REQUIRE_ISOLATION=1
VOLUME ["/data"]

# SIGTERM: the worker stops polling, running activities get a grace time, then are cancelled.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/bin/tini", "--", "node", "/app/bin/flotilla", "worker"]
