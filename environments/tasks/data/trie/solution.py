class _Node:
    __slots__ = ("children", "terminal")

    def __init__(self):
        self.children = {}
        self.terminal = False


class Trie:
    def __init__(self):
        self._root = _Node()
        self._size = 0

    def _find(self, prefix):
        node = self._root
        for ch in prefix:
            node = node.children.get(ch)
            if node is None:
                return None
        return node

    def insert(self, word):
        node = self._root
        for ch in word:
            node = node.children.setdefault(ch, _Node())
        if not node.terminal:
            node.terminal = True
            self._size += 1

    def contains(self, word):
        node = self._find(word)
        return node is not None and node.terminal

    def starts_with(self, prefix):
        node = self._find(prefix)
        return node is not None and (node.terminal or bool(node.children))

    def words_with_prefix(self, prefix):
        node = self._find(prefix)
        out = []
        stack = [(node, prefix)] if node is not None else []
        while stack:
            current, text = stack.pop()
            if current.terminal:
                out.append(text)
            for ch, child in current.children.items():
                stack.append((child, text + ch))
        return sorted(out)

    def remove(self, word):
        path = [self._root]
        for ch in word:
            nxt = path[-1].children.get(ch)
            if nxt is None:
                return False
            path.append(nxt)
        if not path[-1].terminal:
            return False
        path[-1].terminal = False
        self._size -= 1
        for i in range(len(word), 0, -1):
            node = path[i]
            if node.terminal or node.children:
                break
            del path[i - 1].children[word[i - 1]]
        return True

    def __len__(self):
        return self._size
