"""An approximate radix tree of what was sent where: the text of every routed request,
tagged with the replicas it was sent to (as sgl-router keeps one per worker).

Approximate because the router never sees a replica's real cache: it remembers what it sent,
and forgets it in LRU order once a replica's share of the tree passes ``max_chars`` (a replica
evicts too, so old entries are the least likely to be held).

Invariant: a replica tagged on a node is tagged on every ancestor of it, so the deepest tagged
node on a path is that replica's longest remembered prefix, and eviction removes a replica
from a node only once no child of the node holds it.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field


@dataclass(slots=True, eq=False)
class _Node:
    edge: str
    parent: _Node | None
    children: dict[str, _Node] = field(default_factory=dict)
    last_used: dict[str, int] = field(default_factory=dict)  # replica -> tick of its last use


class PrefixTree:
    def __init__(self, max_chars: int = 4_000_000):
        """``max_chars``: how many characters are remembered per replica."""
        self.max_chars = max_chars
        self._root = _Node("", None)
        self._chars: dict[str, int] = {}
        self._tick = 0

    def size(self, replica: str) -> int:
        """Characters remembered for ``replica``."""
        return self._chars.get(replica, 0)

    def match(self, text: str) -> dict[str, int]:
        """replica -> length of the longest prefix of ``text`` it was sent (replicas with none
        are absent). Does not count as a use."""
        out: dict[str, int] = {}
        node, pos = self._root, 0
        while pos < len(text):
            child = node.children.get(text[pos])
            if child is None:
                break
            common = _common_len(child.edge, text, pos)
            for replica in child.last_used:
                out[replica] = pos + common
            if common < len(child.edge):
                break
            node, pos = child, pos + common
        return out

    def insert(self, text: str, replica: str) -> None:
        """Remember ``text`` as sent to ``replica`` (now its most recent use)."""
        self._tick += 1
        node, pos = self._root, 0
        while pos < len(text):
            child = node.children.get(text[pos])
            if child is None:
                child = _Node(text[pos:], node)
                node.children[text[pos]] = child
            common = _common_len(child.edge, text, pos)
            if common < len(child.edge):
                child = self._split(child, common)
            self._tag(child, replica)
            node, pos = child, pos + common
        if self.size(replica) > self.max_chars:
            self.evict(replica, int(self.max_chars * 0.8))  # a margin: not one eviction per insert

    def evict(self, replica: str, target_chars: int) -> None:
        """Forget ``replica``'s least recently used leaves until it holds ``target_chars``."""
        heap = [(n.last_used[replica], id(n), n) for n in self._nodes(replica)
                if not any(replica in c.last_used for c in n.children.values())]
        heapq.heapify(heap)
        while heap and self.size(replica) > target_chars:
            _, _, node = heapq.heappop(heap)
            self._untag(node, replica)
            parent = node.parent
            if (parent is not None and parent is not self._root and replica in parent.last_used
                    and not any(replica in c.last_used for c in parent.children.values())):
                heapq.heappush(heap, (parent.last_used[replica], id(parent), parent))

    def remove_replica(self, replica: str) -> None:
        """Forget everything sent to ``replica`` (it left, or lost its cache)."""
        for node in sorted(self._nodes(replica), key=_depth, reverse=True):
            self._untag(node, replica)
        self._chars.pop(replica, None)

    # ---- internals -------------------------------------------------------------------------
    def _tag(self, node: _Node, replica: str) -> None:
        if replica not in node.last_used:
            self._chars[replica] = self.size(replica) + len(node.edge)
        node.last_used[replica] = self._tick

    def _untag(self, node: _Node, replica: str) -> None:
        del node.last_used[replica]
        self._chars[replica] -= len(node.edge)
        if not node.last_used and not node.children and node.parent is not None:
            del node.parent.children[node.edge[0]]

    def _split(self, node: _Node, at: int) -> _Node:
        """Cut ``node``'s edge at ``at``: a new parent holds the head; returns the parent."""
        head = _Node(node.edge[:at], node.parent, last_used=dict(node.last_used))
        node.parent.children[head.edge[0]] = head
        node.edge = node.edge[at:]
        node.parent = head
        head.children[node.edge[0]] = node
        return head

    def _nodes(self, replica: str) -> list[_Node]:
        out, stack = [], [self._root]
        while stack:
            node = stack.pop()
            for child in node.children.values():
                if replica in child.last_used:
                    out.append(child)
                    stack.append(child)
        return out


def _common_len(edge: str, text: str, pos: int) -> int:
    n = min(len(edge), len(text) - pos)
    i = 0
    while i < n and edge[i] == text[pos + i]:
        i += 1
    return i


def _depth(node: _Node) -> int:
    d = 0
    while node.parent is not None:
        node, d = node.parent, d + 1
    return d
