"""Try: dg-lsp complete dg_lsp/examples/fib.py:8:11"""


def fibonacci(n):
    """The n-th Fibonacci number."""
    if n < 2:
        return n
    return


print([fibonacci(i) for i in range(10)])
