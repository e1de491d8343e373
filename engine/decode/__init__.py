"""How a request is decoded: the family's decoder, the runner of its passes, each step's rules."""
