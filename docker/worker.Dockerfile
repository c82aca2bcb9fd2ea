# A Dask grading worker with this exact grader: build the wheel first (`make wheel`), then
#   docker build -f docker/worker.Dockerfile -t jax-course-worker .
#   docker run --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
#       -v /etc/course-cluster:/run/secrets/course-cluster:ro jax-course-worker tls://sched-host:8786
# The image holds no credentials: the host mounts the course's worker files (ca.pem, worker.pem,
# worker-key.pem from `python -m autograder cluster-certs`, owned by the uid the container runs
# as) read-only at /run/secrets/course-cluster (in Kubernetes, a Secret mounted there). Dask
# reads them from the DASK_DISTRIBUTED__COMM__* variables below and refuses any peer without a
# certificate of the course's authority; without the files the worker does not start.
# bubblewrap needs to create namespaces, which Docker's default seccomp and AppArmor profiles
# forbid; without them `python -m autograder doctor` reports isolation as unavailable and the
# worker refuses every submission (it never grades without isolation). In Kubernetes: a pod
# whose container has securityContext.seccompProfile.type Unconfined and an unconfined AppArmor
# profile (or privileged: true), on a node that allows unprivileged user namespaces.
FROM python:3.11-slim

RUN apt-get update && apt-get install -y --no-install-recommends bubblewrap util-linux \
    && rm -rf /var/lib/apt/lists/*

COPY dist/jax_scaling_course-*.whl /tmp/
RUN pip install --no-cache-dir "$(ls /tmp/jax_scaling_course-*.whl)[cluster]" \
    && rm /tmp/jax_scaling_course-*.whl

# 8 emulated devices on CPU, as everywhere off an accelerator
ENV JAX_NUM_CPU_DEVICES=8 TF_CPP_MIN_LOG_LEVEL=3
# TLS only, with the host's credentials (docs/cluster.md, "The secure recipe")
ENV CREDS=/run/secrets/course-cluster
ENV DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION=True \
    DASK_DISTRIBUTED__COMM__DEFAULT_SCHEME=tls \
    DASK_DISTRIBUTED__COMM__TLS__CA_FILE=$CREDS/ca.pem \
    DASK_DISTRIBUTED__COMM__TLS__WORKER__CERT=$CREDS/worker.pem \
    DASK_DISTRIBUTED__COMM__TLS__WORKER__KEY=$CREDS/worker-key.pem
RUN useradd --create-home grader
USER grader
WORKDIR /home/grader

# the doctor's verdict is the first thing in the worker's log; no credentials, no worker
ENTRYPOINT ["sh", "-c", "python -m autograder doctor; for f in ca.pem worker.pem worker-key.pem; do [ -r \"$CREDS/$f\" ] || { echo \"no $CREDS/$f: mount the course's worker credentials (docs/cluster.md)\" >&2; exit 2; }; done; exec dask worker --nthreads 2 \"$@\"", "--"]
