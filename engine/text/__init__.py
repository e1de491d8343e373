"""Between an editor's text and the model's tokens, and where a hole's text ends."""
