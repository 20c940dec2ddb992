# The Flotilla worker image. Dependencies are installed at build time, so a container starts
# without touching the network or any checkout; it runs as an unprivileged user, and agents run
# under bubblewrap in a user namespace of their own. The container needs (see docker-compose.yml):
#   - seccomp and AppArmor profiles that allow unshare(CLONE_NEWUSER) and mount inside it
#     (`--security-opt seccomp=unconfined --security-opt apparmor=unconfined`, or your own profile);
#   - an unmasked /proc, for the fresh /proc each sandbox mounts (`--security-opt systempaths=unconfined`);
#   - a host kernel that allows unprivileged user namespaces (Debian: kernel.unprivileged_userns_clone=1;
#     Ubuntu 24.04+: kernel.apparmor_restrict_unprivileged_userns=0).
# FLOTILLA_REQUIRE_ISOLATION=1 makes the worker refuse to start when bubblewrap cannot isolate.
FROM node:20-bookworm-slim

# git for workspaces, bubblewrap for sandboxes, tini to reap agents' orphans as PID 1,
# procps for the agents' own tooling. Versions come from the base image's Debian release (its
# security updates included), not pins that go stale.
# hadolint ignore=DL3008
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      bubblewrap ca-certificates git openssh-client procps tini \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY package.json package-lock.json ./
# No install scripts (as npm 11 does by default): nothing Flotilla uses needs them.
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund && npm cache clean --force
COPY tsconfig.json ./
COPY bin ./bin
COPY src ./src

RUN useradd --create-home --uid 10001 --shell /usr/sbin/nologin flotilla \
 && mkdir /data && chown flotilla:flotilla /data
USER 10001:10001
ENV NODE_ENV=production FLOTILLA_HOME=/data FLOTILLA_REQUIRE_ISOLATION=1
VOLUME ["/data"]

# SIGTERM: the worker stops polling, running activities get a grace time, then are cancelled.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/bin/tini", "--", "node", "/app/bin/flotilla", "worker"]
