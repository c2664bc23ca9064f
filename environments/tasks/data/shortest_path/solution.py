import heapq
import itertools


def shortest_path(graph, start, goal):
    if start not in graph and not any(start in edges for edges in graph.values()):
        raise KeyError(start)
    best = {start: 0}
    previous = {}
    tie = itertools.count()
    queue = [(0, next(tie), start)]
    done = set()
    while queue:
        cost, _, node = heapq.heappop(queue)
        if node in done:
            continue
        done.add(node)
        if node == goal:
            path = [node]
            while path[-1] in previous:
                path.append(previous[path[-1]])
            return cost, path[::-1]
        for nxt, weight in graph.get(node, {}).items():
            new_cost = cost + weight
            if nxt not in best or new_cost < best[nxt]:
                best[nxt] = new_cost
                previous[nxt] = node
                heapq.heappush(queue, (new_cost, next(tie), nxt))
    return None
