"""Try: dg-lsp complete dg_lsp/examples/stack.py:14:27"""


class Stack:
    """Last in, first out."""

    def __init__(self):
        self.items = []

    def push(self, item):
        self.items.append(item)

    def pop(self):
        return self.items.

    def __len__(self):
        return len(self.items)


stack = Stack()
stack.push(1)
stack.push(2)
print(stack.pop(), len(stack))
