"""The schedule: one compute stream, one lane per mesh axis and link direction.

A greedy list scheduler, deterministic: among the tasks whose inputs are ready it starts the one
that can start earliest (ties: the longest chain of work behind it, then program order) on
the resources it needs. Communication therefore
overlaps any compute that does not depend on it, and two transfers overlap when they use
different link directions, which is what the hardware can do.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .cost import Task


@dataclass
class Timeline:
    tasks: list[Task]
    start: dict[int, float] = field(default_factory=dict)
    end: dict[int, float] = field(default_factory=dict)

    @property
    def makespan(self) -> float:
        return max(self.end.values(), default=0.0)

    @property
    def compute_time(self) -> float:
        return sum(t.duration for t in self.tasks if t.kind == "compute")

    @property
    def comm_time(self) -> float:
        """Time during which at least one link carries data (union of transfer intervals)."""
        iv = sorted((self.start[t.id], self.end[t.id]) for t in self.tasks
                    if t.kind == "comm" and t.duration > 0)
        total, cur_s, cur_e = 0.0, None, None
        for s, e in iv:
            if cur_e is None or s > cur_e:
                if cur_e is not None:
                    total += cur_e - cur_s
                cur_s, cur_e = s, e
            else:
                cur_e = max(cur_e, e)
        if cur_e is not None:
            total += cur_e - cur_s
        return total

    @property
    def exposed_comm_time(self) -> float:
        """Time the compute stream sits idle (waiting for data from other chips)."""
        return max(0.0, self.makespan - self.compute_time)

    def lanes(self) -> list:
        out = []
        for t in self.tasks:
            for r in t.resources:
                if r != "compute" and r not in out:
                    out.append(r)
        return sorted(out)

    def summary(self) -> dict:
        us = 1e6
        return {"time_us": self.makespan * us, "compute_us": self.compute_time * us,
                "comm_us": self.comm_time * us, "exposed_comm_us": self.exposed_comm_time * us,
                "n_compute": sum(t.kind == "compute" for t in self.tasks),
                "n_comm": sum(t.kind == "comm" and t.duration > 0 for t in self.tasks)}


def schedule(tasks: list[Task]) -> Timeline:
    """Start, among the ready tasks, the one with the least key (earliest start, then the
    longest chain behind it, then program order). The ready tasks are kept per set of resources
    they need (a handful: the compute stream, a few link directions), in two heaps each: those
    whose inputs arrived by the time those resources are free (all start then: ordered by chain
    and program order) and those still waiting for an input (ordered by its arrival). So a step
    costs a log, not a pass over every ready task: the model's time stays linear in the program
    however many transfers are ready at once."""
    import heapq

    tl = Timeline(tasks)
    free: dict = {}
    n_left = {t.id: len(t.deps) for t in tasks}
    users: dict[int, list[int]] = {t.id: [] for t in tasks}
    for t in tasks:
        for d in t.deps:
            users[d].append(t.id)
    ready_at: dict[int, float] = {}
    by_id = {t.id: t for t in tasks}
    level = _bottom_levels(tasks, users)
    waiting: dict[tuple, list] = {}  # resources -> heap of (ready_at, -level, id)
    startable: dict[tuple, list] = {}  # resources -> heap of (-level, id)

    def make_ready(tid: int) -> None:
        res = tuple(by_id[tid].resources)
        heapq.heappush(waiting.setdefault(res, []), (ready_at[tid], -level[tid], tid))
        startable.setdefault(res, [])

    for t in tasks:
        if n_left[t.id] == 0:
            ready_at[t.id] = 0.0
            make_ready(t.id)
    left = len(ready_at)
    while left:
        best, best_key, best_res = None, None, None
        for res, wait in waiting.items():
            go = startable[res]
            at = max((free.get(r, 0.0) for r in res), default=0.0)
            while wait and wait[0][0] <= at:
                _, neg, tid = heapq.heappop(wait)
                heapq.heappush(go, (neg, tid))
            if go:
                key = (at, go[0][0], go[0][1])
            elif wait:
                key = wait[0]
            else:
                continue
            if best_key is None or key < best_key:
                best, best_key, best_res = key[2], key, res
        heapq.heappop(startable[best_res] if startable[best_res]
                      and startable[best_res][0][1] == best else waiting[best_res])
        left -= 1
        t = by_id[best]
        s = best_key[0]
        e = s + t.duration
        tl.start[best], tl.end[best] = s, e
        for r in t.resources:
            free[r] = e
        for u in users[best]:
            n_left[u] -= 1
            ready_at[u] = max(ready_at.get(u, 0.0), e)
            if n_left[u] == 0:
                make_ready(u)
                left += 1
    if len(tl.end) != len(tasks):
        raise RuntimeError("dependency cycle in the modeled program")
    return tl


def _bottom_levels(tasks: list[Task], users: dict) -> dict:
    """Longest path (seconds) from each task to the end: the usual list-scheduling priority,
    so that among tasks able to start at once, the one feeding a long chain (e.g. the slice a
    transfer waits on) goes first."""
    by_id = {t.id: t for t in tasks}
    indeg = {t.id: len(users[t.id]) for t in tasks}
    order = [tid for tid, n in indeg.items() if n == 0]
    level: dict = {}
    i = 0
    while i < len(order):
        tid = order[i]
        i += 1
        level[tid] = by_id[tid].duration + max((level[u] for u in users[tid]), default=0.0)
        for d in by_id[tid].deps:
            indeg[d] -= 1
            if indeg[d] == 0:
                order.append(d)
    for t in tasks:  # only reached on a cycle; the scheduler reports it
        level.setdefault(t.id, t.duration)
    return level
