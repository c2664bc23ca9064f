import heapq


def topo_sort(dependencies):
    nodes = set(dependencies)
    for deps in dependencies.values():
        nodes.update(deps)
    waiting = {node: set() for node in nodes}
    dependents = {node: [] for node in nodes}
    for node, deps in dependencies.items():
        for dep in deps:
            if dep not in waiting[node]:
                waiting[node].add(dep)
                dependents[dep].append(node)
    ready = [node for node in nodes if not waiting[node]]
    heapq.heapify(ready)
    order = []
    while ready:
        node = heapq.heappop(ready)
        order.append(node)
        for nxt in dependents[node]:
            waiting[nxt].discard(node)
            if not waiting[nxt]:
                heapq.heappush(ready, nxt)
    if len(order) != len(nodes):
        stuck = sorted(node for node in nodes if waiting[node])
        raise ValueError(f"dependency cycle among: {', '.join(stuck)}")
    return order
