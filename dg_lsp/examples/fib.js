// Try: dg-lsp complete dg_lsp/examples/fib.js:7:9

function fibonacci(n) {
  if (n < 2) {
    return n;
  }
  return
}

console.log([...Array(10).keys()].map(fibonacci));
