# A Dask grading worker with this exact grader: build the wheel first (`make wheel`), then
#   docker build -f docker/worker.Dockerfile -t jax-course-worker .
#   docker run --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
#       jax-course-worker tcp://sched-host:8786
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
RUN useradd --create-home grader
USER grader
WORKDIR /home/grader

# the doctor's verdict is the first thing in the worker's log
ENTRYPOINT ["sh", "-c", "python -m autograder doctor; exec dask worker --nthreads 2 \"$@\"", "--"]
