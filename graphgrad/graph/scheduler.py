"""Layer ``graph``: ``Scheduler``, an Interpreter that runs a Graph on N worker threads
("devices"): a node starts as soon as its data and control inputs are done, on
whichever worker is free. NumPy releases the GIL inside large kernels, so
independent matmuls really overlap. Each run leaves an execution log of
(node, worker, start, end) that shows what overlapped: ``log``, a ``Timeline``
(timeline.py) that prints as a text timeline and draws as a Gantt chart.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Sequence
from .interpreter import Interpreter
from .node import Node
from .timeline import LogEntry, Timeline, overlaps

__all__ = ["Scheduler", "LogEntry", "Timeline", "overlaps"]


class Scheduler(Interpreter):
    """Run graphs on ``workers`` threads; ``log`` holds the latest run's entries."""

    def __init__(self, graph, state: dict | None = None, workers: int = 2):
        super().__init__(graph, state)
        self.workers = workers
        self.log = Timeline()

    def sub(self, graph) -> Interpreter:
        return Interpreter(graph, self.state)  # sub-graphs run inside one node's task

    def execute(self, nodes: Sequence[Node], env: dict) -> dict:
        todo = set(nodes)
        indeg = {n: 0 for n in nodes}
        users: dict[Node, list[Node]] = {n: [] for n in nodes}
        for n in nodes:
            ins = {*n.input_nodes(), *n.deps}
            if n.kind == "assign":
                ins.add(n.target)
            for i in ins:
                if i in todo:
                    indeg[n] += 1
                    users[i].append(n)
        ready = deque(n for n in nodes if indeg[n] == 0)
        lock = threading.Condition()
        left = [len(nodes)]
        failure: list[BaseException] = []
        t0 = time.perf_counter()
        log: list[LogEntry] = []

        def work(w: int) -> None:
            while True:
                with lock:
                    while not ready and left[0] and not failure:
                        lock.wait()
                    if not left[0] or failure:
                        return
                    node = ready.popleft()
                start = time.perf_counter() - t0
                try:
                    value = self.run_node(node, env)
                except BaseException as e:  # noqa: BLE001 - re-raised on the caller's thread
                    with lock:
                        failure.append(e)
                        lock.notify_all()
                    return
                end = time.perf_counter() - t0
                with lock:
                    env[node] = value
                    log.append(LogEntry(node.name, w, start, end))
                    left[0] -= 1
                    for u in users[node]:
                        indeg[u] -= 1
                        if indeg[u] == 0:
                            ready.append(u)
                    lock.notify_all()

        threads = [threading.Thread(target=work, args=(w,), daemon=True)
                   for w in range(self.workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.log = Timeline(sorted(log, key=lambda e: e.start))
        if failure:
            raise failure[0]
        return env

    def entry(self, name: str) -> LogEntry:
        return self.log.entry(name)
