"""Measurements of designs that are not (yet) in habroker: each patches a broker it starts,
never the product code, and says in its docstring what it tried."""
