"""The tools' door: OpenAI's and llama.cpp's completion APIs over HTTP (`dg-engine serve
--http`), the port they listen on, and the FIM templates their prompts are split by."""
