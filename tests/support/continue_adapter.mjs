// Continue's published adapter package (@continuedev/openai-adapters) making one call, for
// tests/integration/test_http_api.py: `node continue_adapter.mjs PACKAGE_DIR` with
// {"config": LLMConfig, "call": "fimStream" | "completionStream" | "completionNonStream",
//  "body": the request} on stdin; prints {"pieces": [the text of each chunk, in order]}.
// PACKAGE_DIR is the folder whose node_modules holds the package (the tests install it there).
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const entry = join(process.argv[2], "node_modules", "@continuedev", "openai-adapters", "dist",
                   "index.js");
const { constructLlmApi } = await import(pathToFileURL(entry).href);
const { config, call, body } = JSON.parse(readFileSync(0, "utf8"));
const api = constructLlmApi(config);
const signal = new AbortController().signal;
const pieces = [];
if (call === "completionNonStream") {
  const answer = await api.completionNonStream(body, signal);
  pieces.push(answer.choices[0].text);
} else if (call === "completionStream") {
  for await (const chunk of api.completionStream(body, signal)) {
    pieces.push(chunk.choices[0]?.text ?? "");
  }
} else if (call === "fimStream") {
  // Chat-completion chunks, as Continue's autocomplete reads them (delta.content).
  for await (const chunk of api.fimStream(body, signal)) {
    pieces.push(chunk.choices[0]?.delta?.content ?? "");
  }
} else {
  throw new Error(`unknown call ${call}`);
}
process.stdout.write(JSON.stringify({ pieces }) + "\n");
